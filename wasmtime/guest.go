package wasmtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"unsafe"

	wt "github.com/bytecodealliance/wasmtime-go/v39"

	"github.com/spine-run/spine/guest"
	"github.com/spine-run/spine/internal/abi"
	"github.com/spine-run/spine/internal/engine"
	"github.com/spine-run/spine/internal/wasm"
)

// Guest is one instance of the Guest in a wasmtime store of its own. Only
// one goroutine uses it at a time.
type Guest struct {
	e        *Engine
	store    *wt.Store
	inst     *wt.Instance
	linker   *wt.Linker
	mem      *wt.Memory
	base     unsafe.Pointer       // the linear memory's start, fixed for the store's life
	mapped   *engine.MappedMemory // the image mapped over the memory's start; nil before
	alloc    *wt.Func
	release  *wt.Func
	execute  *wt.Func
	fdWrite  *wt.Func // WASI's own (through forwardWAT), for descriptors other than stdout and stderr
	poll     *wt.Func // WASI's own poll_oneoff (through forwardWAT), for polls of descriptors
	open     *wt.Func // WASI's own path_open and fd_renumber (through forwardWAT)
	renumber *wt.Func
	scratch  string // the host folder preopened at "/"

	stdout, stderr capture
	runCtx         context.Context
	capture        io.Reader      // the randomness while the image is captured; nil after
	broken         bool           // a descriptor of 0–4 was closed or moved
	fds            map[int32]bool // the descriptors the Guest opened and holds (descriptors.go)
	failed         bool           // a call into the Guest trapped
}

// NewGuest returns a Guest whose memory is the image, ready for a run. The
// caller closes it.
func (e *Engine) NewGuest(ctx context.Context) (*Guest, error) {
	g, err := e.newGuest(ctx)
	if err != nil {
		return nil, err
	}
	if err := g.restore(ctx); err != nil {
		g.Close()
		return nil, err
	}
	return g, nil
}

// newGuest instantiates the module in a new store: WASI with the standard
// library's folder and a scratch folder preopened (descriptors 3 and 4, as
// under wazero), stdout and stderr captured, the Host module linked.
func (e *Engine) newGuest(ctx context.Context) (*Guest, error) {
	g := &Guest{e: e, runCtx: ctx, fds: map[int32]bool{}}
	g.stdout.max, g.stderr.max = e.cfg.MaxOutput, e.cfg.MaxOutput
	var err error
	if g.scratch, err = os.MkdirTemp("", "spine-wasmtime-scratch-"); err != nil {
		return nil, err
	}
	g.store = wt.NewStoreWithData(e.engine, g)
	g.store.Limiter(int64(e.cfg.MemoryLimit), -1, -1, -1, -1)
	wasi := wt.NewWasiConfig()
	if err := wasi.PreopenDir(e.libDir, guest.StdlibMount, wt.DIR_READ, wt.FILE_READ); err != nil {
		g.Close()
		return nil, err
	}
	if err := wasi.PreopenDir(g.scratch, "/", wt.DIR_READ|wt.DIR_WRITE, wt.FILE_READ|wt.FILE_WRITE); err != nil {
		g.Close()
		return nil, err
	}
	g.store.SetWasi(wasi)
	if err := g.link(); err != nil {
		g.Close()
		return nil, err
	}
	inst, err := g.linker.Instantiate(g.store, e.module)
	if err != nil {
		g.Close()
		return nil, fmt.Errorf("%w: instantiate: %v", ErrGuest, err)
	}
	g.inst = inst
	g.mem = inst.GetExport(g.store, "memory").Memory()
	g.alloc = inst.GetFunc(g.store, abi.Alloc.Name)
	g.release = inst.GetFunc(g.store, abi.Release.Name)
	g.execute = inst.GetFunc(g.store, abi.Execute.Name)
	if g.mem == nil || g.alloc == nil || g.release == nil || g.execute == nil {
		g.Close()
		return nil, fmt.Errorf("%w: the Guest lacks an export the Host calls", ErrGuest)
	}
	g.base = g.mem.Data(g.store)
	if err := g.linkForward(); err != nil {
		g.Close()
		return nil, err
	}
	return g, nil
}

// start does what instantiating the original module would have done, then
// starts CPython.
func (g *Guest) start(ctx context.Context, segments []wasm.DataSegment) error {
	mem := g.mem.UnsafeData(g.store)
	for _, seg := range segments {
		if uint64(seg.Offset)+uint64(len(seg.Data)) > uint64(len(mem)) {
			return fmt.Errorf("%w: data segment at %d does not fit in memory", ErrGuest, seg.Offset)
		}
		copy(mem[seg.Offset:], seg.Data)
	}
	g.runCtx = ctx
	if _, err := g.call(abi.Initialize.Name); err != nil {
		return err
	}
	v, err := g.call(abi.ABIVersion.Name)
	if err != nil {
		return err
	}
	if v != abi.Version {
		return fmt.Errorf("%w: Guest ABI version %d, this Host speaks %d", ErrGuest, v, abi.Version)
	}
	if code, err := g.call(abi.Init.Name); err != nil || code != 0 {
		return fmt.Errorf("%w: CPython did not start (init step %d, %v): %s", ErrGuest, code, err, g.stderr.String())
	}
	_, err = g.call(wasm.TouchPreopenExport)
	return err
}

// restore gives the Guest the image: its memory grown to the image's size
// and the image mapped copy-on-write over it.
func (g *Guest) restore(ctx context.Context) error {
	if have := g.mem.Size(g.store); have < g.e.pages {
		if _, err := g.mem.Grow(g.store, g.e.pages-have); err != nil {
			return fmt.Errorf("spine: cannot grow memory to the image's %d pages: %w", g.e.pages, err)
		}
	}
	mapped, err := g.e.image.MapOver(g.base)
	if err != nil {
		return err
	}
	g.mapped = mapped
	g.runCtx = ctx
	_, err = g.call(wasm.TouchPreopenExport)
	return err
}

// call calls an export without arguments that answers an i32 (or nothing).
func (g *Guest) call(name string) (int32, error) {
	f := g.inst.GetFunc(g.store, name)
	if f == nil {
		return 0, fmt.Errorf("%w: the Guest does not export %s", ErrGuest, name)
	}
	r, err := f.Call(g.store)
	if err != nil {
		g.failed = true
		return 0, g.trapError(name, err)
	}
	v, _ := r.(int32)
	return v, nil
}

// trapError is the error of a call into the Guest that did not return: the
// run's context's when it ended (the tick stopped the Guest), else the trap.
func (g *Guest) trapError(name string, err error) error {
	if ctxErr := g.runCtx.Err(); ctxErr != nil {
		return ctxErr
	}
	return fmt.Errorf("%w: %s: %v", ErrGuest, name, err)
}

// Execute runs one execute request and returns the Guest's response.
func (g *Guest) Execute(ctx context.Context, request []byte) ([]byte, error) {
	if g.failed {
		return nil, fmt.Errorf("%w: an earlier call trapped: close the Guest", ErrGuest)
	}
	g.runCtx = ctx
	g.stdout.reset()
	g.stderr.reset()
	r, err := g.alloc.Call(g.store, int32(len(request)))
	if err != nil {
		g.failed = true
		return nil, g.trapError("alloc", err)
	}
	ptr := uint32(r.(int32))
	mem := g.mem.UnsafeData(g.store)
	if ptr == 0 || uint64(ptr)+uint64(len(request)) > uint64(len(mem)) {
		return nil, fmt.Errorf("%w: could not place %d bytes in Guest memory", ErrGuest, len(request))
	}
	copy(mem[ptr:], request)
	r, err = g.execute.Call(g.store, int32(ptr), int32(len(request)))
	if err != nil {
		g.failed = true
		return nil, g.trapError("execute", err)
	}
	if err := g.free(ptr); err != nil {
		return nil, err
	}
	packed := uint64(r.(int64))
	if packed == 0 {
		return nil, fmt.Errorf("%w: execute gave no response: %s", ErrGuest, g.stderr.String())
	}
	out, n := uint64(uint32(packed)), uint64(packed>>32)
	mem = g.mem.UnsafeData(g.store) // the run may have grown it
	if out+n > uint64(len(mem)) {
		return nil, fmt.Errorf("%w: execute response outside Guest memory", ErrGuest)
	}
	response := append([]byte(nil), mem[out:out+n]...)
	if err := g.free(uint32(out)); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		// The run's end cut a sleep short and the program ended before its
		// next tick: stopped all the same, the Guest whole.
		return nil, err
	}
	return response, nil
}

func (g *Guest) free(ptr uint32) error {
	if _, err := g.release.Call(g.store, int32(ptr)); err != nil {
		g.failed = true
		return g.trapError("release", err)
	}
	return nil
}

// Output is what the last run wrote to stdout and stderr, each cut at
// MaxOutput bytes.
func (g *Guest) Output() (stdout, stderr string) { return g.stdout.String(), g.stderr.String() }

// ErrNotReusable is Reset's error for a Guest whose state cannot be the
// image's again: a call trapped, its memory grew past the image, a
// descriptor of its own was closed, or it holds a file open (wasmtime keeps
// the descriptor table outside linear memory, where no reset reaches).
var ErrNotReusable = errors.New("spine: the Guest cannot be reset")

// Reset drops everything the last run wrote to memory and to the scratch
// folder, back to the image.
func (g *Guest) Reset() error {
	g.runCtx = context.Background()
	if !g.reusable() {
		return ErrNotReusable
	}
	if err := g.mapped.Reset(); err != nil {
		return err
	}
	return emptyFolder(g.scratch)
}

// reusable reports whether all of the Guest's state can be the image's
// again once its memory is reset.
func (g *Guest) reusable() bool {
	// wasmtime reserves a 32-bit memory whole on 64-bit hosts, so it never
	// moves; were it moved, the image's mapping would be elsewhere.
	return g.mapped != nil && !g.failed && !g.broken && len(g.fds) == 0 &&
		g.mem.Size(g.store) == g.e.pages && g.mem.Data(g.store) == g.base
}

// memory is the Guest's linear memory, not copied.
func (g *Guest) memory() []byte { return g.mem.UnsafeData(g.store) }

// Close drops the store (wasmtime unmaps the memory) and the scratch folder.
func (g *Guest) Close() {
	if g.linker != nil {
		g.linker.Close()
	}
	if g.store != nil {
		g.store.Close()
	}
	if g.scratch != "" {
		os.RemoveAll(g.scratch)
	}
}

// emptyFolder removes what dir holds, leaving dir.
func emptyFolder(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, entry := range entries {
		if err := os.RemoveAll(filepath.Join(dir, entry.Name())); err != nil {
			return err
		}
	}
	return nil
}
