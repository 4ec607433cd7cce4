// Package engine is the Guest machinery under spine.Runner: the compiled
// Guest, its instances, the prepared image they start from (copied or mapped
// copy-on-write), the warm pool, the descriptor accounting that makes a used
// Guest as good as a new one, and the checked caches of compiled code, of the
// module it is compiled from, of images and of their hot pages. It knows
// nothing of tools: the Runner gives it the bridge's Host functions and the
// warm-up to run before the image is taken.
package engine

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spine-run/spine/guest"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/spine-run/spine/internal/abi"
	"github.com/spine-run/spine/internal/scratch"
	"github.com/spine-run/spine/internal/wasm"
)

// WasmPageSize is the size of a page of linear memory.
const WasmPageSize = 64 << 10

var (
	// ErrGuest wraps every failure of the Guest outside Python: a trap, an
	// exit, or a broken response.
	ErrGuest = errors.New("spine: guest failed")

	// ErrArtifact wraps every problem with the Guest artifact found by New.
	ErrArtifact = errors.New("spine: bad guest artifact")
)

// Config is what an Engine is made from.
type Config struct {
	Wasm, StdlibZip []byte // the Guest artifact

	// Packages are archives of packages mounted beside the standard
	// library's (Warm puts them on sys.path).
	Packages []guest.File

	// ImageKey names the prepared image in the disk cache: it must change
	// whenever what Warm does, or the artifact, changes.
	ImageKey string

	// ArtifactID names the artifact in the disk cache (the module made from
	// it); "" for the hash of Wasm.
	ArtifactID string

	MemoryLimit    uint64         // bytes of linear memory per Guest
	MaxOutput      int            // bytes of stdout, and of stderr, kept per run
	MaxDescriptors int            // files and directories a run may hold open
	Scratch        scratch.Limits // each run's scratch tree
	PoolSize       int            // Guests kept ready; <= 0 for none
	Start          StartMode
	CacheDir       string // "" for the user's cache folder
	NoDiskCache    bool
	SeedCacheDir   string // files CacheDir lacks are copied from here first; "" for none

	// Logger, when set, gets New's own lines: one before a compile the
	// cache cannot answer, one when the Guests are ready (with the time
	// taken), and a cache folder that cannot be used (Warn).
	Logger *slog.Logger

	// Bridge is the tool bridge's side of the Guest's imports (internal/abi),
	// in its Host module; the engine adds its own (tick and the descriptor
	// checks). Its zero value answers as a Host without tools.
	Bridge abi.Host

	// Warm runs in a Guest just started from scratch, before its memory is
	// taken as the image every run starts from.
	Warm func(ctx context.Context, g *Instance) error
}

// Engine runs Guests of one artifact.
type Engine struct {
	cfg          Config
	libFS        fs.FS // the standard library's archive and Packages, mounted at guest.StdlibMount
	runtime      wazero.Runtime
	cache        wazero.CompilationCache
	cacheDir     string                             // "" when compiled code is cached in memory only
	module       guestModule                        // what was compiled: mapped from the cache folder, or made by New
	compiled     wazero.CompiledModule              // the Guest without its data segments
	segments     func() ([]wasm.DataSegment, error) // the Guest's data segments, for a start from scratch
	instrumented bool                               // the Guest has ticks and the descriptor checks
	mode         StartMode                          // resolved: never StartAuto
	image        *image                             // nil with StartFresh
	pool         *pool                              // nil without an image or without PoolSize

	imageName   string      // the image's name in the cache folder
	hot         []uint32    // the image's hot pages (hot.go); nil when unknown
	hotPath     string      // where to record them when unknown; "" not to
	hotRecorded atomic.Bool // recordHotPages has run

	instancesMade atomic.Int64

	closing context.Context // done once Close begins
	stop    context.CancelFunc
}

// New compiles the Guest (through the checked code cache), prepares its image
// and fills the pool.
func New(ctx context.Context, cfg Config) (*Engine, error) {
	e := &Engine{cfg: cfg}
	e.closing, e.stop = context.WithCancel(context.Background())
	if err := e.setup(ctx); err != nil {
		e.Close(context.Background())
		return nil, err
	}
	return e, nil
}

func (e *Engine) setup(ctx context.Context) error {
	switch e.mode = e.cfg.Start; e.mode {
	case StartAuto:
		e.mode = StartCopy
		if COWSupported {
			e.mode = StartCOW
		}
	case StartCOW:
		if !COWSupported {
			return fmt.Errorf("spine: %w", errNoCOWHere)
		}
	case StartFresh, StartCopy:
	default:
		return fmt.Errorf("spine: unknown start mode %d", e.cfg.Start)
	}
	e.libFS = guest.LibFS(append([]guest.File{{Name: guest.StdlibZipName, Data: e.cfg.StdlibZip}}, e.cfg.Packages...)...)
	start := time.Now()
	log := e.cfg.logger()
	dir, err := usableCacheFolder(cacheFolder(e.cfg.NoDiskCache, e.cfg.CacheDir), e.cfg.SeedCacheDir)
	if err != nil {
		if dir == "" {
			log.Warn("the compilation cache folder cannot be used: compiled code is kept in memory only, and every new process compiles the Guest again",
				"dir", cacheFolder(e.cfg.NoDiskCache, e.cfg.CacheDir), "error", err.Error())
		} else {
			log.Warn("the seed cache could not be copied whole: what is missing is made anew", "error", err.Error())
		}
	}
	if err := e.prepareModule(dir); err != nil {
		return err
	}
	cold := !hasCompiledCode(dir, e.module.code)
	if cold {
		where := "in memory only"
		if dir != "" {
			where = "into " + dir
		}
		log.Info("compiling the Guest: its compiled code is not in the cache yet (this takes a while, once, on this machine: cached " + where + ")")
	}
	// An image holds the indices of the module's functions (in CPython's
	// function pointers), which another instrumentation of the same
	// artifact numbers differently: an image is named by the module too.
	e.imageName = e.cfg.ImageKey + "-" + moduleID(e.module.code)

	// The cached image is loaded while the module is compiled: they share
	// nothing until the first Guest starts, and each takes one of the cores
	// a new process usually has to itself.
	type loadedImage struct {
		img *image
		hot []uint32
	}
	var loaded chan loadedImage
	if e.mode != StartFresh && dir != "" {
		loaded = make(chan loadedImage, 1)
		path, limit, cow := imagePath(dir, e.imageName), e.cfg.MemoryLimit, e.mode == StartCOW
		hot := hotPath(dir, e.imageName)
		go func() {
			var l loadedImage
			l.img, _ = loadImage(path, limit, cow) // not there or not intact: captured below
			if l.img != nil && cow {
				l.hot = loadHotPages(hot, l.img.size/pageSize)
			}
			loaded <- l
		}()
	}
	err = e.compile(ctx, dir)
	var l loadedImage
	if loaded != nil {
		l = <-loaded
	}
	if err != nil {
		l.img.close()
		return err
	}
	if e.mode == StartFresh {
		return nil
	}
	if l.img == nil {
		if l.img, err = e.prepareImage(ctx); err != nil {
			return err
		}
	}
	e.image, e.hot = l.img, l.hot
	if e.hot == nil && e.mode == StartCOW && e.cacheDir != "" {
		e.hotPath = hotPath(e.cacheDir, e.imageName)
	}
	if e.cfg.PoolSize > 0 {
		e.pool = newPool(e, e.cfg.PoolSize)
	}
	if cold {
		log.Info("the Guest is compiled and ready", "elapsed", time.Since(start).Round(time.Millisecond).String())
	}
	return nil
}

// prepareModule makes the module to compile, or takes it from the cache
// folder dir.
func (e *Engine) prepareModule(dir string) error {
	module, segments, err := prepareModule(modulePath(dir, &e.cfg), e.cfg.Wasm)
	if err != nil {
		return err
	}
	e.module, e.instrumented = module, module.instrumented
	if segments != nil {
		e.segments = func() ([]wasm.DataSegment, error) { return segments, nil }
	} else {
		e.segments = sync.OnceValues(func() ([]wasm.DataSegment, error) {
			segments, err := wasm.DataSegments(e.cfg.Wasm)
			if err != nil {
				return nil, fmt.Errorf("%w: %v", ErrArtifact, err)
			}
			return segments, nil
		})
	}
	return nil
}

// compile compiles the module (through the checked code cache) and checks
// its exports.
func (e *Engine) compile(ctx context.Context, dir string) error {
	module := e.module
	var err error
	if e.cache, e.cacheDir, err = openCodeCache(dir == "", dir, module.code); err != nil {
		return err
	}
	config := wazero.NewRuntimeConfig().
		WithCloseOnContextDone(!e.instrumented).
		WithMemoryLimitPages(uint32(e.cfg.MemoryLimit / WasmPageSize)).
		WithCompilationCache(e.cache)
	e.runtime = wazero.NewRuntimeWithConfig(ctx, config)
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, e.runtime); err != nil {
		return fmt.Errorf("spine: WASI: %w", err)
	}
	if err := e.instantiateHost(ctx); err != nil {
		return fmt.Errorf("spine: host module: %w", err)
	}
	// Functions compile on every core: the first compile of a large Guest
	// (the data Guest's 28 MB) takes its CPU time divided by the cores in
	// wall time. A module the cache holds is not compiled.
	compileCtx := experimental.WithCompilationWorkers(ctx, runtime.GOMAXPROCS(0))
	compiled, err := e.runtime.CompileModule(compileCtx, module.code)
	if err != nil {
		if module.cached {
			os.Remove(modulePath(dir, &e.cfg)) // from the cache: the next New makes it anew
		}
		return fmt.Errorf("%w: %v", ErrArtifact, err)
	}
	sealCodeCache(e.cacheDir, module.code)
	if err := checkExports(compiled.ExportedFunctions()); err != nil {
		return err
	}
	e.compiled = compiled
	return nil
}

// checkExports checks the Guest's exports against the ABI's: each one it
// needs there, with its signature.
func checkExports(exports map[string]api.FunctionDefinition) error {
	for _, want := range abi.Exports {
		f, ok := exports[want.Name]
		switch {
		case !ok && want.Optional:
		case !ok:
			return fmt.Errorf("%w: it does not export %s", ErrArtifact, want.Name)
		case !slices.Equal(f.ParamTypes(), want.Params) || !slices.Equal(f.ResultTypes(), want.Results):
			return fmt.Errorf("%w: its export %s has the signature %v → %v, not %v → %v", ErrArtifact, want.Name,
				f.ParamTypes(), f.ResultTypes(), want.Params, want.Results)
		}
	}
	return nil
}

var errNoCOWHere = errors.New("copy-on-write images need Linux")

// instantiateHost registers the Guest's Host module: the bridge's
// functions, the tick, the descriptor checks and the errno restatement of
// the scratch file system.
func (e *Engine) instantiateHost(ctx context.Context) error {
	i32, i64 := api.ValueTypeI32, api.ValueTypeI64
	_, err := e.cfg.Bridge.Register(e.runtime.NewHostModuleBuilder(abi.Module)).
		NewFunctionBuilder().
		WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, m api.Module, stack []uint64) {
			stack[0] = tick(ctx)
		}), nil, []api.ValueType{i32}).
		Export(wasm.TickImport).
		NewFunctionBuilder().
		WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, m api.Module, stack []uint64) {
			fd := int32(stack[0])
			stack[0] = wasiErrnoSuccess
			if d := descriptorsFrom(ctx); d != nil {
				stack[0] = uint64(d.beforeClose(fd))
			}
		}), []api.ValueType{i32}, []api.ValueType{i32}).
		Export("fd_close").
		NewFunctionBuilder().
		WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, m api.Module, stack []uint64) {
			from, to := int32(stack[0]), int32(stack[1])
			stack[0] = wasiErrnoSuccess
			if d := descriptorsFrom(ctx); d != nil {
				stack[0] = uint64(d.beforeRenumber(from, to))
			}
		}), []api.ValueType{i32, i32}, []api.ValueType{i32}).
		Export("fd_renumber").
		NewFunctionBuilder().
		WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, m api.Module, stack []uint64) {
			stack[0] = wasiErrnoSuccess
			if d := descriptorsFrom(ctx); d != nil {
				stack[0] = uint64(d.beforeOpen())
			}
		}), []api.ValueType{i32, i32, i32, i32, i32, i64, i64, i32, i32}, []api.ValueType{i32}).
		Export("path_open").
		NewFunctionBuilder().
		WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, m api.Module, stack []uint64) {
			if d := descriptorsFrom(ctx); d != nil && d.scratch != nil {
				stack[0] = uint64(d.scratch.Restate(uint32(stack[0])))
			}
		}), []api.ValueType{i32}, []api.ValueType{i32}).
		Export(wasm.ErrnoImport).
		Instantiate(ctx)
	return err
}

// tick answers an instrumented Guest's spine.tick (internal/wasm): the fuel
// for its next loop iterations or, once the run's context has ended, 0, so the
// Guest traps — after an interrupt and a grace for a session's run. Being a call into Go, it also lets the scheduler run
// others.
func tick(ctx context.Context) uint64 {
	if ctx.Err() != nil {
		return stopTick(ctx)
	}
	if !wakeTick(ctx) {
		return 0
	}
	return wasm.FuelPerTick
}

// Acquire returns a Guest ready for a run: from the pool, from the image, or
// started from scratch.
func (e *Engine) Acquire(ctx context.Context) (*Instance, error) {
	var inst *Instance
	var err error
	if e.pool != nil {
		inst, err = e.pool.get(ctx)
	} else {
		inst, err = e.newInstance(ctx, e.image, 0)
	}
	if err == nil && e.hot != nil {
		e.prefault(inst)
	}
	return inst, err
}

// Release takes back a Guest after its run; clean says the run ended without
// a trap or a stop. The Guest is reused only when all of its state can be
// the image's again; otherwise it is closed.
func (e *Engine) Release(g *Instance, clean bool) {
	if clean && e.hotPath != "" {
		e.recordHotPages(g)
	}
	if e.pool != nil {
		e.pool.put(g, clean)
		return
	}
	g.Close()
}

// NewInstance makes a Guest outside the pool, from the image (or from
// scratch with StartFresh). The caller closes it.
func (e *Engine) NewInstance(ctx context.Context) (*Instance, error) {
	return e.newInstance(ctx, e.image, 0)
}

// HasImage says whether Guests start from the prepared image (and so have
// what Warm installed), not from scratch.
func (e *Engine) HasImage() bool { return e.image != nil }

// Stats are the engine's counters.
type Stats struct {
	InstancesMade int64     // Guests instantiated (the image's and the pool's included)
	PoolSize      int       // the pool's target size; 0 without a pool
	PoolReady     int       // Guests waiting in the pool now
	Start         StartMode // how runs start (never StartAuto)
	ModuleCached  bool      // New took the module to compile from the cache folder
	HotPages      int       // pages a Guest gets before its first run (hot.go)
}

// Stats returns the engine's counters.
func (e *Engine) Stats() Stats {
	s := Stats{InstancesMade: e.instancesMade.Load(), Start: e.mode, ModuleCached: e.module.cached, HotPages: len(e.hot)}
	if e.pool != nil {
		s.PoolSize, s.PoolReady = e.pool.size, e.pool.readyCount()
	}
	return s
}

// Close releases the pool, the compiled Guest, the image and the caches. The
// caller must have ended every run first.
func (e *Engine) Close(ctx context.Context) error {
	e.stop()
	if e.pool != nil {
		e.pool.close()
	}
	var err error
	if e.runtime != nil {
		err = e.runtime.Close(ctx)
	}
	e.image.close()
	e.module.close() // after the runtime: nothing reads it any more
	if e.cache != nil {
		if cacheErr := e.cache.Close(ctx); err == nil {
			err = cacheErr
		}
	}
	return err
}

// pageSize is the size of a page of the Guest's memory as the host maps it
// (copy-on-write images, their hot pages): 4 KiB, as on every platform
// Spine maps images on.
const pageSize = 4096
