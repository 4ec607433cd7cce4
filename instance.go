package spine

import (
	"context"
	"crypto/rand"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spine-run/spine/guest"
	"github.com/spine-run/spine/internal/wasm"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
)

// instance is one Guest: a module instance with CPython started in it.
// Only one goroutine uses an instance at a time.
type instance struct {
	mod                        api.Module
	allocFn, releaseFn, execFn api.Function
	stdout, stderr             *capture
	fds                        *descriptors // the WASI descriptor table's accounting
	cow                        *cowMemory   // nil unless started copy-on-write
	pages                      uint32       // memory size, in pages, when ready for a run
	runCtx                     context.Context
}

// newInstance makes a Guest ready to run a program. With img nil it starts
// CPython from scratch (data segments, _initialize, init); otherwise its memory
// is the image, mapped copy-on-write or copied.
func (r *Runner) newInstance(ctx context.Context, img *image) (*instance, error) {
	r.instancesMade.Add(1)
	inst := &instance{
		stdout: newCapture(r.opts.MaxOutput),
		stderr: newCapture(r.opts.MaxOutput),
		fds:    newDescriptors(guest.StdlibFS(r.stdlib), r.opts.MaxDescriptors, r.instrumented),
		runCtx: ctx,
	}
	config := wazero.NewModuleConfig().
		WithName("").
		WithStartFunctions(). // _initialize runs below, after the data segments
		WithFSConfig(wazero.NewFSConfig().WithFSMount(inst.fds, guest.StdlibMount)).
		WithSysWalltime().
		WithSysNanotime().
		WithRandSource(rand.Reader).
		WithStdout(inst.stdout).
		WithStderr(inst.stderr).
		WithNanosleep(func(ns int64) { sleep(inst.runCtx, ns) })
	instantiateCtx := ctx
	if img != nil && img.memfd != nil {
		cow, err := img.memfd.newMemory(r.opts.MemoryLimit)
		if err != nil {
			return nil, err
		}
		inst.cow = cow
		instantiateCtx = experimental.WithMemoryAllocator(ctx, experimental.MemoryAllocatorFunc(
			func(cap, max uint64) experimental.LinearMemory { return cow }))
	}
	mod, err := r.runtime.InstantiateModule(instantiateCtx, r.compiled, config)
	if err != nil {
		if inst.cow != nil {
			inst.cow.Free()
		}
		return nil, err
	}
	inst.mod = mod
	inst.allocFn = mod.ExportedFunction("alloc")
	inst.releaseFn = mod.ExportedFunction("release")
	inst.execFn = mod.ExportedFunction("execute")
	if img == nil {
		err = inst.start(ctx, r.segments)
	} else {
		err = inst.restore(img)
	}
	if touch := mod.ExportedFunction(wasm.TouchPreopenExport); err == nil && touch != nil {
		_, err = touch.Call(ctx)
	}
	if err != nil {
		inst.close()
		return nil, err
	}
	inst.pages = mod.Memory().Size() / wasmPageSize
	inst.fds.ready()
	return inst, nil
}

// start does what instantiating the original module would have done, then
// starts CPython.
func (inst *instance) start(ctx context.Context, segments []wasm.DataSegment) error {
	mem := inst.mod.Memory()
	for _, seg := range segments {
		if !mem.Write(seg.Offset, seg.Data) {
			return fmt.Errorf("%w: data segment at %d does not fit in memory", ErrArtifact, seg.Offset)
		}
	}
	if _, err := inst.mod.ExportedFunction("_initialize").Call(ctx); err != nil {
		return err
	}
	results, err := inst.mod.ExportedFunction("abi_version").Call(ctx)
	if err != nil {
		return err
	}
	if v := uint32(results[0]); v != guestABIVersion {
		return fmt.Errorf("%w: Guest ABI version %d, this Host speaks %d", ErrArtifact, v, guestABIVersion)
	}
	results, err = inst.mod.ExportedFunction("init").Call(ctx)
	if err != nil {
		return err
	}
	if code := uint32(results[0]); code != 0 {
		return fmt.Errorf("%w: CPython did not start (init step %d): %s", ErrGuest, code, inst.stderr.tail())
	}
	return nil
}

// restore gives the instance the image's memory.
func (inst *instance) restore(img *image) error {
	mem := inst.mod.Memory()
	if have := mem.Size() / wasmPageSize; have < img.pages() {
		if _, ok := mem.Grow(img.pages() - have); !ok {
			return fmt.Errorf("spine: cannot grow memory to the image's %d bytes", img.size)
		}
	}
	if inst.cow == nil && !mem.Write(0, img.data) {
		return fmt.Errorf("spine: cannot copy the image into memory")
	}
	return nil
}

// begin prepares the instance for one run under ctx, and returns the context
// every call into the Guest during the run must use: it carries the
// instance's descriptors to the Host's checks.
func (inst *instance) begin(ctx context.Context) context.Context {
	inst.runCtx = ctx
	inst.stdout.reset()
	inst.stderr.reset()
	return context.WithValue(ctx, descriptorsKey{}, inst.fds)
}

// reusable reports whether, after a run that ended without a trap or a stop,
// the instance can be reset and run again: whether all of its state is the
// image's once its memory is reset (docs/rationale.md, "One Guest state").
// Its memory must not have grown past the image, and its descriptor table
// must be as it was.
func (inst *instance) reusable() bool {
	return inst.cow != nil && !inst.mod.IsClosed() &&
		inst.mod.Memory().Size()/wasmPageSize == inst.pages && inst.fds.intact()
}

// reset drops everything the last run wrote to memory, back to the image.
func (inst *instance) reset() error {
	inst.runCtx = nil
	return inst.cow.reset()
}

// execute runs one execute request and returns the Guest's response bytes,
// refusing a response over maxResponse bytes.
func (inst *instance) execute(ctx context.Context, request []byte, maxResponse int) ([]byte, error) {
	results, err := inst.allocFn.Call(ctx, uint64(len(request)))
	if err != nil {
		return nil, err
	}
	ptr := uint32(results[0])
	if ptr == 0 || !inst.mod.Memory().Write(ptr, request) {
		return nil, fmt.Errorf("%w: could not place the request in Guest memory", ErrGuest)
	}
	results, err = inst.execFn.Call(ctx, uint64(ptr), uint64(len(request)))
	if err != nil {
		return nil, err
	}
	inst.free(ctx, ptr)
	packed := results[0]
	if packed == 0 {
		return nil, &noResponseError{stderr: inst.stderr.tail()}
	}
	out, n := uint32(packed), uint32(packed>>32)
	defer inst.free(ctx, out)
	if int64(n) > int64(maxResponse) {
		return nil, fmt.Errorf("%w: execute response of %d bytes is over %d", ErrGuest, n, maxResponse)
	}
	data, ok := inst.mod.Memory().Read(out, n)
	if !ok {
		return nil, fmt.Errorf("%w: execute response outside Guest memory", ErrGuest)
	}
	return append([]byte(nil), data...), nil
}

// noResponseError is an execute that gave no response: the bootstrap failed
// while it reported the program's outcome, which only the program can cause
// (it exhausted memory or recursion just then, or broke what the bootstrap
// uses). stderr is the end of what the Guest wrote there.
type noResponseError struct{ stderr string }

func (e *noResponseError) Error() string { return "spine: guest failed: execute failed: " + e.stderr }
func (e *noResponseError) Unwrap() error { return ErrGuest }

// lastLine is the last line of the Guest's stderr that is not blank: the
// exception that stopped the bootstrap.
func (e *noResponseError) lastLine() string {
	lines := strings.Split(strings.TrimRight(e.stderr, " \n"), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

func (inst *instance) free(ctx context.Context, ptr uint32) {
	_, _ = inst.releaseFn.Call(ctx, uint64(ptr))
}

// close closes the module; wazero then frees its memory (the cowMemory
// mapping included).
func (inst *instance) close() {
	_ = inst.mod.Close(context.Background())
}

// sleep is the Guest's nanosleep: a real sleep that ends when ctx is done.
func sleep(ctx context.Context, ns int64) {
	if ns <= 0 {
		return
	}
	if ctx == nil {
		ctx = context.Background()
	}
	timer := time.NewTimer(time.Duration(ns))
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-ctx.Done():
	}
}

// capture is a bounded writer for the Guest's stdout or stderr. It keeps up to
// max bytes (cut at a UTF-8 boundary), never fails a write, and records
// whether anything was dropped.
type capture struct {
	buf       []byte
	max       int
	truncated bool
}

func newCapture(max int) *capture { return &capture{max: max} }

func (c *capture) Write(p []byte) (int, error) {
	room := c.max - len(c.buf)
	if len(p) <= room {
		c.buf = append(c.buf, p...)
		return len(p), nil
	}
	if !c.truncated {
		c.truncated = true
		keep := p[:max(room, 0)]
		// Drop a rune cut in half by the limit (at most UTFMax-1 bytes).
		for cut := 0; cut < utf8.UTFMax-1 && len(keep) > 0; cut++ {
			if r, size := utf8.DecodeLastRune(keep); r != utf8.RuneError || size > 1 {
				break
			}
			keep = keep[:len(keep)-1]
		}
		c.buf = append(c.buf, keep...)
	}
	return len(p), nil
}

func (c *capture) reset() {
	c.buf = c.buf[:0]
	c.truncated = false
}

func (c *capture) String() string { return string(c.buf) }

// tailBytes is how much of the Guest's stderr an error message quotes.
const tailBytes = 1 << 10

// tail is the end of the capture, at most tailBytes of it (from a rune's
// start), for an error message: the end is where a traceback's cause is.
func (c *capture) tail() string {
	if len(c.buf) <= tailBytes {
		return string(c.buf)
	}
	start := len(c.buf) - tailBytes
	for start < len(c.buf) && !utf8.RuneStart(c.buf[start]) {
		start++
	}
	return "…" + string(c.buf[start:])
}
