// Package wasmtime runs the Guest on wasmtime (its Go binding, with cgo): the
// same instrumented module the wazero engine runs (internal/wasm), its ticks,
// its Host module, an image taken after a warm-up and mapped copy-on-write
// under every Guest, and the engine's reset of it (engine.SharedImage, Linux
// only: New fails elsewhere).
//
// It is a measurement, not a second engine of the Runner: docs/rationale.md
// ("A second engine on wasmtime") lists what it holds and what it cannot, and
// docs/performance.md its figures. Its module is its own, so that the core
// stays pure Go.
package wasmtime

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	wt "github.com/bytecodealliance/wasmtime-go/v39"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/guest"
	"github.com/spine-run/spine/internal/engine"
	"github.com/spine-run/spine/internal/warmup"
	"github.com/spine-run/spine/internal/wasm"
)

// bindingVersion names the wasmtime the compiled code in the cache is for.
const bindingVersion = "wasmtime-go-v39.0.1"

// Config is what an Engine is made from.
type Config struct {
	MemoryLimit uint64 // bytes of linear memory per Guest; 0 for 256 MiB
	MaxOutput   int    // bytes of stdout, and of stderr, kept per run; 0 for 1 MiB

	// MaxDescriptors caps the files and directories a run may hold open;
	// 0 for 64, the Runner's default.
	MaxDescriptors int

	// CacheDir keeps the compiled Guest between processes ("" for none:
	// every New compiles it, which takes a while).
	CacheDir string

	// Call answers the Guest's tool calls (the bridge's spine.call): the
	// request's bytes in, the response's out. nil for a Host without tools.
	// Early reads are not offered: prepare, resolve and peek answer as a
	// Host without tools.
	Call func(ctx context.Context, request []byte) []byte

	// Warm is the execute request the first Guest runs before its memory
	// becomes the image; nil for none.
	Warm []byte

	// Artifact is the Guest: nil for the default one (package guest), else
	// as the Runner's Options.Artifact (the data Guest: guest/data's
	// Artifact). Its PackagesZip lies beside the standard library as
	// warmup.DataZip, where the Runner's lies; Warm puts it on sys.path and
	// imports Preload (warmup.With), as the Runner's warm-up does.
	Artifact *spine.Artifact
}

// Engine runs Guests of the embedded artifact on wasmtime.
type Engine struct {
	cfg     Config
	engine  *wt.Engine
	module  *wt.Module
	forward *wt.Module // forwardWAT
	libDir  string     // the standard library's folder, preopened read-only at guest.StdlibMount
	image   *engine.SharedImage
	pages   uint64 // the image's size in wasm pages

	compileTime time.Duration // compiling the Guest, or loading it from CacheDir
}

// wasmPage is the size of a page of linear memory.
const wasmPage = 64 << 10

// New compiles the Guest (or maps it from CacheDir), starts one from
// scratch, runs Warm in it and takes its memory as the image.
func New(ctx context.Context, cfg Config) (*Engine, error) {
	if cfg.MemoryLimit == 0 {
		cfg.MemoryLimit = 256 << 20
	}
	if cfg.MaxOutput == 0 {
		cfg.MaxOutput = 1 << 20
	}
	if cfg.MaxDescriptors == 0 {
		cfg.MaxDescriptors = 64
	}
	e := &Engine{cfg: cfg}
	if err := e.setup(ctx); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

func (e *Engine) setup(ctx context.Context) error {
	a := e.cfg.Artifact
	if a == nil {
		a = &spine.Artifact{Wasm: guest.Wasm, StdlibZip: guest.StdlibZip}
	}
	stripped, segments, err := wasm.SplitData(a.Wasm)
	if err != nil {
		return fmt.Errorf("spine: the Guest artifact: %w", err)
	}
	module, err := wasm.Instrument(stripped)
	if err != nil {
		return fmt.Errorf("spine: the Guest cannot be instrumented: %w", err)
	}
	config := wt.NewConfig()
	config.SetWasmThreads(false)
	e.engine = wt.NewEngineWithConfig(config)
	start := time.Now()
	if e.module, err = e.compile(module); err != nil {
		return err
	}
	e.compileTime = time.Since(start)
	forward, err := wt.Wat2Wasm(forwardWAT)
	if err != nil {
		return err
	}
	if e.forward, err = wt.NewModule(e.engine, forward); err != nil {
		return err
	}
	if e.libDir, err = os.MkdirTemp("", "spine-wasmtime-lib-"); err != nil {
		return err
	}
	files := []guest.File{{Name: guest.StdlibZipName, Data: a.StdlibZip}}
	if len(a.PackagesZip) > 0 {
		files = append(files, guest.File{Name: warmup.DataZip, Data: a.PackagesZip})
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(e.libDir, f.Name), f.Data, 0o444); err != nil {
			return err
		}
	}
	g, err := e.newGuest(ctx)
	if err != nil {
		return err
	}
	defer g.Close()
	g.capture = newCaptureRandom()
	if err := g.start(ctx, segments); err != nil {
		return err
	}
	if e.cfg.Warm != nil {
		if _, err := g.Execute(ctx, e.cfg.Warm); err != nil {
			return fmt.Errorf("spine: the warm-up: %w", err)
		}
	}
	data := g.memory()
	e.pages = uint64(len(data)) / wasmPage
	e.image, err = engine.NewSharedImage(data)
	return err
}

// compile compiles module, through the cache folder when there is one.
func (e *Engine) compile(module []byte) (*wt.Module, error) {
	if e.cfg.CacheDir == "" {
		return wt.NewModule(e.engine, module)
	}
	sum := sha256.Sum256(module)
	path := filepath.Join(e.cfg.CacheDir, hex.EncodeToString(sum[:16])+"-"+bindingVersion+".cwasm")
	if m, err := wt.NewModuleDeserializeFile(e.engine, path); err == nil {
		return m, nil
	}
	m, err := wt.NewModule(e.engine, module)
	if err != nil {
		return nil, fmt.Errorf("spine: compiling the Guest: %w", err)
	}
	if code, err := m.Serialize(); err == nil && os.MkdirAll(e.cfg.CacheDir, 0o755) == nil {
		tmp := path + ".tmp"
		if os.WriteFile(tmp, code, 0o644) == nil {
			_ = os.Rename(tmp, path) // a cache: failing costs only time
		}
	}
	return m, nil
}

// Close releases the image, the compiled Guest and the library folder. Every
// Guest must be closed first.
func (e *Engine) Close() error {
	if e.image != nil {
		e.image.Close()
	}
	for _, m := range []*wt.Module{e.module, e.forward} {
		if m != nil {
			m.Close()
		}
	}
	if e.engine != nil {
		e.engine.Close()
	}
	if e.libDir != "" {
		return os.RemoveAll(e.libDir)
	}
	return nil
}

// ErrGuest wraps every failure of the Guest outside Python: a trap, an
// exit, a broken response.
var ErrGuest = errors.New("spine: guest failed (wasmtime)")
