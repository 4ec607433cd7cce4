package engine

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	mathrand "math/rand/v2"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/experimental/sysfs"
	"github.com/tetratelabs/wazero/sys"

	"github.com/spine-run/spine/guest"
	"github.com/spine-run/spine/internal/abi"
	"github.com/spine-run/spine/internal/scratch"
	"github.com/spine-run/spine/internal/wasm"
)

// Instance is one Guest: a module instance with CPython started in it.
// Only one goroutine uses an instance at a time.
type Instance struct {
	mod            api.Module
	fns            guestFunctions
	stdout, stderr *capture
	fds            *descriptors // the WASI descriptor table's accounting
	cow            *cowMemory   // nil unless started copy-on-write
	img            *image       // the image the instance started from; nil from scratch
	pages          uint32       // memory size, in pages, when ready for a run
	failed         bool         // a call into the Guest did not return: it stopped mid-instruction
	session        bool         // a session's: a run out of time is interrupted before it is stopped
	ran            bool         // it was handed to a run (and given the hot pages)
	runCtx         context.Context
	src            Source // the run's time and random bytes (Use); nil: the system's
}

// guestFunctions are the Guest's exports the Host calls, looked up once.
type guestFunctions struct {
	alloc, release, execute, prefixBegin, prefixFeed api.Function
	interrupt, wake                                  api.Function // nil in a Guest without them
}

func lookupFunctions(mod api.Module) guestFunctions {
	return guestFunctions{
		alloc:       mod.ExportedFunction(abi.Alloc.Name),
		release:     mod.ExportedFunction(abi.Release.Name),
		execute:     mod.ExportedFunction(abi.Execute.Name),
		prefixBegin: mod.ExportedFunction(abi.PrefixBegin.Name),
		prefixFeed:  mod.ExportedFunction(abi.PrefixFeed.Name),
		interrupt:   mod.ExportedFunction(abi.Interrupt.Name),
		wake:        mod.ExportedFunction(abi.Wake.Name),
	}
}

// newInstance makes a Guest ready to run a program. With img nil it starts
// CPython from scratch (data segments, _initialize, init); otherwise its memory
// is the image, mapped copy-on-write or copied. maxMemory caps its linear
// memory below the engine's MemoryLimit; 0 means MemoryLimit.
func (e *Engine) newInstance(ctx context.Context, img *image, maxMemory uint64) (*Instance, error) {
	if maxMemory == 0 || maxMemory > e.cfg.MemoryLimit {
		maxMemory = e.cfg.MemoryLimit
	}
	e.instancesMade.Add(1)
	inst := &Instance{
		img:    img,
		stdout: newCapture(e.cfg.MaxOutput),
		stderr: newCapture(e.cfg.MaxOutput),
		fds:    newDescriptors(e.libFS, e.cfg.Scratch, e.cfg.MaxDescriptors, e.instrumented),
		runCtx: ctx,
	}
	config := wazero.NewModuleConfig().
		WithName("").
		WithStartFunctions(). // _initialize runs below, after the data segments
		WithFSConfig(wazero.NewFSConfig().WithFSMount(inst.fds, guest.StdlibMount).(sysfs.FSConfig).
			WithSysFSMount(inst.fds.scratch, ScratchMount)).
		// wazero's resolutions for its system clocks (WithSysWalltime, WithSysNanotime).
		WithWalltime(inst.walltime, sys.ClockResolution(time.Microsecond)).
		WithNanotime(inst.nanotime, 1).
		WithRandSource(guestRandom{inst: inst, system: randSource(ctx)}).
		WithStdout(inst.stdout).
		WithStderr(inst.stderr).
		WithNanosleep(inst.sleep)
	instantiateCtx := ctx
	switch {
	case img != nil && img.memfd != nil:
		cow, err := img.memfd.newMemory(maxMemory)
		if err != nil {
			return nil, err
		}
		inst.cow = cow
		instantiateCtx = experimental.WithMemoryAllocator(ctx, experimental.MemoryAllocatorFunc(
			func(cap, max uint64) experimental.LinearMemory { return cow }))
	case maxMemory < e.cfg.MemoryLimit:
		instantiateCtx = experimental.WithMemoryAllocator(ctx, experimental.MemoryAllocatorFunc(
			func(cap, max uint64) experimental.LinearMemory { return &sliceMemory{max: maxMemory} }))
	}
	mod, err := e.runtime.InstantiateModule(instantiateCtx, e.compiled, config)
	if err != nil {
		if inst.cow != nil {
			inst.cow.Free()
		}
		return nil, err
	}
	inst.mod = mod
	inst.fns = lookupFunctions(mod)
	if img == nil {
		var segments []wasm.DataSegment
		if segments, err = e.segments(); err == nil {
			err = inst.start(ctx, segments)
		}
	} else {
		err = inst.restore(img)
	}
	if touch := mod.ExportedFunction(wasm.TouchPreopenExport); err == nil && touch != nil {
		_, err = touch.Call(ctx)
	}
	if err != nil {
		inst.Close()
		return nil, err
	}
	inst.pages = mod.Memory().Size() / WasmPageSize
	inst.fds.ready()
	return inst, nil
}

// start does what instantiating the original module would have done, then
// starts CPython.
func (inst *Instance) start(ctx context.Context, segments []wasm.DataSegment) error {
	mem := inst.mod.Memory()
	for _, seg := range segments {
		if !mem.Write(seg.Offset, seg.Data) {
			return fmt.Errorf("%w: data segment at %d does not fit in memory", ErrArtifact, seg.Offset)
		}
	}
	if _, err := inst.mod.ExportedFunction(abi.Initialize.Name).Call(ctx); err != nil {
		return err
	}
	results, err := inst.mod.ExportedFunction(abi.ABIVersion.Name).Call(ctx)
	if err != nil {
		return err
	}
	if v := uint32(results[0]); v != abi.Version {
		return fmt.Errorf("%w: Guest ABI version %d, this Host speaks %d", ErrArtifact, v, abi.Version)
	}
	results, err = inst.mod.ExportedFunction(abi.Init.Name).Call(ctx)
	if err != nil {
		return err
	}
	if code := uint32(results[0]); code != 0 {
		return fmt.Errorf("%w: CPython did not start (init step %d): %s", ErrGuest, code, inst.stderr.tail())
	}
	return nil
}

// restore gives the instance the image's memory.
func (inst *Instance) restore(img *image) error {
	mem := inst.mod.Memory()
	if have := mem.Size() / WasmPageSize; have < img.pages() {
		if _, ok := mem.Grow(img.pages() - have); !ok {
			return fmt.Errorf("spine: cannot grow memory to the image's %d bytes", img.size)
		}
	}
	if inst.cow == nil && !mem.Write(0, img.data) {
		return fmt.Errorf("spine: cannot copy the image into memory")
	}
	return nil
}

// ScratchMount is where the Guest sees its scratch tree: "/", under the
// standard library's mount, which stays the longer match for its folder.
const ScratchMount = "/"

// Begin prepares the instance for one run under ctx, and returns the context
// every call into the Guest during the run must use: it carries the
// instance's descriptors to the Host's checks and, for a session's Guest,
// what the tick needs to interrupt the run when ctx ends. The run gets a new,
// empty scratch tree (Scratch), which End drops.
//
// wake, when not nil, is the run's wake flag: whoever sets it asks the Guest
// to run its chain step (docs/early-reads.md); the tick loads it and, when it
// is set, clears it and calls the Guest's wake export. A Guest without that
// export is never woken.
func (inst *Instance) Begin(ctx context.Context, wake *atomic.Bool) context.Context {
	inst.runCtx = ctx
	inst.stdout.reset()
	inst.stderr.reset()
	inst.fds.scratch.Begin()
	ctx = context.WithValue(ctx, descriptorsKey{}, inst.fds)
	if inst.session && inst.fns.interrupt != nil {
		ctx = context.WithValue(ctx, interruptKey{}, &interrupter{fn: inst.fns.interrupt, grace: interruptGrace})
	}
	if wake != nil && inst.fns.wake != nil {
		// Last, so that the tick finds it first.
		ctx = context.WithValue(ctx, wakeKey{}, &waker{flag: wake, fn: inst.fns.wake})
	}
	return ctx
}

// waker is what the tick needs to wake the Guest: the run's flag and the
// Guest's wake export.
type waker struct {
	flag *atomic.Bool
	fn   api.Function
}

type wakeKey struct{}

// wakeTick calls the Guest's wake when the run's flag is set: one atomic load
// at every tick, a call into the Guest only when a read finished that it asked
// after. false when the call failed (the Guest is broken: the tick stops it).
func wakeTick(ctx context.Context) bool {
	w, _ := ctx.Value(wakeKey{}).(*waker)
	if w == nil || !w.flag.Load() {
		return true
	}
	w.flag.Store(false)
	// wake only schedules a pending call in the Guest: the chain step runs at
	// the program's next bytecode, after this tick has returned.
	_, err := w.fn.Call(ctx)
	return err == nil
}

// interruptGrace is how many ticks (each FuelPerTick loop iterations, a few
// hundred microseconds of the interpreter) a session's run has, once
// interrupted, to unwind before it is stopped by force: plenty for
// KeyboardInterrupt to reach the top (the interpreter checks for it at every
// backward jump and call) and the Guest to answer; a program that catches it
// every time and goes on, or is stuck in one long C call, uses them up.
const interruptGrace = 100

// interrupter is a session run's soft stop: when the run's context ends, the
// tick asks the Guest to raise KeyboardInterrupt in the program, which leaves
// the interpreter whole, so the session keeps its state. It asks again at
// every tick (a bare except may have caught the last one); a run still going
// grace ticks later is stopped by a trap, and its session lost.
type interrupter struct {
	fn    api.Function
	grace int
}

type interruptKey struct{}

// stopTick is the tick's answer once the run's context has ended: more fuel
// while an interrupted session run unwinds, 0 (a trap) otherwise.
func stopTick(ctx context.Context) uint64 {
	in, _ := ctx.Value(interruptKey{}).(*interrupter)
	if in == nil || in.grace <= 0 {
		return 0
	}
	in.grace--
	// The Guest's interrupt only sets flags; it runs under a context that
	// has not ended, so that its own ticks (if any) do not stop it.
	if _, err := in.fn.Call(context.WithoutCancel(ctx)); err != nil {
		return 0
	}
	return wasm.FuelPerTick
}

// Scratch is the current run's scratch tree, nil outside a run.
func (inst *Instance) Scratch() *scratch.Tree { return inst.fds.scratch.Tree() }

// End drops the run's scratch tree: its files are gone, and any the Guest
// still holds open answer EBADF.
func (inst *Instance) End() {
	inst.fds.scratch.End()
	if inst.src != nil {
		inst.Use(nil)
	}
}

// reusable reports whether, after a run that ended without a trap or a stop,
// the instance can be reset and run again: whether all of its state is the
// image's once its memory is reset (docs/rationale.md, "One Guest state").
// Its memory must not have grown past the image, and its descriptor table
// must be as it was.
func (inst *Instance) reusable() bool {
	return inst.cow != nil && !inst.mod.IsClosed() &&
		inst.mod.Memory().Size()/WasmPageSize == inst.pages && inst.fds.intact()
}

// Reset drops everything the last run wrote to memory, back to the image.
func (inst *Instance) Reset() error {
	inst.runCtx = nil
	return inst.cow.reset()
}

// Execute runs one execute request and returns the Guest's response bytes,
// refusing a response over maxResponse bytes.
func (inst *Instance) Execute(ctx context.Context, request []byte, maxResponse int) ([]byte, error) {
	packed, err := inst.callWithBytes(ctx, inst.fns.execute, request)
	if err != nil {
		return nil, err
	}
	if packed == 0 {
		return nil, &NoResponseError{Stderr: inst.stderr.tail()}
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

// PrefixBegin and PrefixFeed call the Guest's prefix_begin and prefix_feed
// with data (prefix mode), returning the Guest's i32 answer. A negative
// answer is the Guest's own failure, which prefix mode survives: it only
// means fewer early reads.
func (inst *Instance) PrefixBegin(ctx context.Context, data []byte) (int32, error) {
	r, err := inst.callWithBytes(ctx, inst.fns.prefixBegin, data)
	return int32(uint32(r)), err
}

func (inst *Instance) PrefixFeed(ctx context.Context, data []byte) (int32, error) {
	r, err := inst.callWithBytes(ctx, inst.fns.prefixFeed, data)
	return int32(uint32(r)), err
}

// callWithBytes is every call that hands the Guest bytes: it copies data
// into memory the Guest allocates, calls fn(ptr, len), frees the copy and
// returns fn's answer. The Guest is not used again after an error.
// It runs as one counted call: the reset knows the page faults it took.
func (inst *Instance) callWithBytes(ctx context.Context, fn api.Function, data []byte) (answer uint64, err error) {
	inst.cow.counted(func() { answer, err = inst.callWithBytesCounted(ctx, fn, data) })
	return answer, err
}

func (inst *Instance) callWithBytesCounted(ctx context.Context, fn api.Function, data []byte) (uint64, error) {
	results, err := inst.fns.alloc.Call(ctx, uint64(len(data)))
	if err != nil {
		inst.failed = true
		return 0, err
	}
	ptr := uint32(results[0])
	if ptr == 0 || !inst.mod.Memory().Write(ptr, data) {
		return 0, fmt.Errorf("%w: could not place %d bytes in Guest memory", ErrGuest, len(data))
	}
	if results, err = fn.Call(ctx, uint64(ptr), uint64(len(data))); err != nil {
		inst.failed = true
		// No free: after a trap or an exit the Guest is closed, its memory
		// unmapped, and calling into it would fault.
		return 0, err
	}
	inst.free(ctx, ptr)
	return results[0], nil
}

// Failed reports whether a call into the Guest failed (a trap, an exit, a
// stop): the Guest stopped in the middle of its work and cannot be trusted to
// run again.
func (inst *Instance) Failed() bool { return inst.failed }

// Memory is the Guest's linear memory. Whatever the caller writes to it, the
// next Reset finds (the pages written outside the Guest's calls are not
// counted: cowMemory.counted).
func (inst *Instance) Memory() api.Memory {
	inst.cow.exposed()
	return inst.mod.Memory()
}

// Tee gives the run's stdout and stderr, as the Guest writes them, also to
// stdout and stderr (nil: not that stream), on top of the capture and its
// cap, until the next Begin. Their Write is called on the Guest's goroutine,
// so it must return quickly.
func (inst *Instance) Tee(stdout, stderr io.Writer) {
	inst.stdout.tee, inst.stderr.tee = stdout, stderr
}

// Output is what the run wrote to stdout and stderr, and whether either
// went over its cap.
func (inst *Instance) Output() (stdout, stderr string, stdoutTruncated, stderrTruncated bool) {
	return inst.stdout.String(), inst.stderr.String(), inst.stdout.truncated, inst.stderr.truncated
}

// NoResponseError is an execute that gave no response: the bootstrap failed
// while it reported the program's outcome, which only the program can cause
// (it exhausted memory or recursion just then, or broke what the bootstrap
// uses). Stderr is the end of what the Guest wrote there.
type NoResponseError struct{ Stderr string }

func (e *NoResponseError) Error() string { return "spine: guest failed: execute failed: " + e.Stderr }
func (e *NoResponseError) Unwrap() error { return ErrGuest }

// LastLine is the last line of the Guest's stderr that is not blank: the
// exception that stopped the bootstrap.
func (e *NoResponseError) LastLine() string {
	lines := strings.Split(strings.TrimRight(e.Stderr, " \n"), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

func (inst *Instance) free(ctx context.Context, ptr uint32) {
	inst.cow.counted(func() {
		if _, err := inst.fns.release.Call(ctx, uint64(ptr)); err != nil {
			inst.failed = true // stopped inside free: the allocator may be half-updated
		}
	})
}

// Close closes the module; wazero then frees its memory (the cowMemory
// mapping included).
func (inst *Instance) Close() {
	_ = inst.mod.Close(context.Background())
}

// sleep is the Guest's nanosleep. A session's run whose ctx ends while it
// sleeps is interrupted as it wakes, as Ctrl-C interrupts a sleep natively:
// the program gets KeyboardInterrupt where it slept, not at a later tick,
// which a program that ends soon after would never see (its handlers then not
// run). The Guest's interrupt only sets flags.
func (inst *Instance) sleep(ns int64) {
	ctx := inst.runCtx
	inst.pause(ctx, ns)
	if ctx != nil && ctx.Err() != nil && inst.session && inst.fns.interrupt != nil {
		_, _ = inst.fns.interrupt.Call(context.WithoutCancel(ctx))
	}
}

// sleep is a real sleep of ns nanoseconds that ends when ctx is done.
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
	tee       io.Writer // also gets every write, uncut; set for one run by Tee
}

func newCapture(max int) *capture { return &capture{max: max} }

func (c *capture) Write(p []byte) (int, error) {
	if c.tee != nil {
		_, _ = c.tee.Write(p) // the tee never blocks the Guest for long and has its own errors
	}
	if c.truncated { // nothing after the cut, even where a cut rune left room
		return len(p), nil
	}
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
	c.tee = nil
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

// captureKey marks the context of the Guest an image is captured from.
type captureKey struct{}

// captureSeed seeds the randomness an image's Guest sees while it is made.
var captureSeed = [32]byte{'s', 'p', 'i', 'n', 'e', ' ', 'i', 'm', 'a', 'g', 'e'}

// randSource is the Guest's randomness: the system's, except while an image
// is captured. Then it is a fixed sequence, so that every capture of a key,
// on any machine, is the same bytes (CPython's hash secret is drawn at
// start): a session's snapshot is a difference from its image and must apply
// to the image of any Host with the same key (docs/sessions.md). Runs start
// from the image, so all of them share that secret, as they do anyway.
func randSource(ctx context.Context) io.Reader {
	if ctx.Value(captureKey{}) != nil {
		return mathrand.NewChaCha8(captureSeed)
	}
	return rand.Reader
}
