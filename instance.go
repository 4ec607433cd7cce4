package spine

import (
	"context"
	"crypto/rand"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/sys"
)

// instance is one Guest: a module instance with CPython started in it.
// Only one goroutine uses an instance at a time.
type instance struct {
	mod                        api.Module
	allocFn, releaseFn, execFn api.Function
	stdout, stderr             *capture
}

// newInstance instantiates the Guest and starts CPython in it. Its sleeps end
// early when ctx is done, so time.sleep cannot outlive the run.
func (r *Runner) newInstance(ctx context.Context) (*instance, error) {
	inst := &instance{stdout: newCapture(r.opts.MaxOutput), stderr: newCapture(r.opts.MaxOutput)}
	config := wazero.NewModuleConfig().
		WithName("").
		WithStartFunctions("_initialize").
		WithFSConfig(r.fsConfig).
		WithSysWalltime().
		WithSysNanotime().
		WithRandSource(rand.Reader).
		WithStdout(inst.stdout).
		WithStderr(inst.stderr).
		WithNanosleep(sleeper(ctx))
	mod, err := r.runtime.InstantiateModule(ctx, r.compiled, config)
	if err != nil {
		return nil, err
	}
	inst.mod = mod
	inst.allocFn = mod.ExportedFunction("alloc")
	inst.releaseFn = mod.ExportedFunction("release")
	inst.execFn = mod.ExportedFunction("execute")
	results, err := mod.ExportedFunction("abi_version").Call(ctx)
	if err != nil {
		inst.close()
		return nil, err
	}
	if v := uint32(results[0]); v != guestABIVersion {
		inst.close()
		return nil, fmt.Errorf("%w: Guest ABI version %d, this Host speaks %d", ErrArtifact, v, guestABIVersion)
	}
	results, err = mod.ExportedFunction("init").Call(ctx)
	if err != nil {
		inst.close()
		return nil, err
	}
	if code := uint32(results[0]); code != 0 {
		inst.close()
		return nil, fmt.Errorf("%w: CPython did not start (init step %d): %s", ErrGuest, code, inst.stderr.String())
	}
	return inst, nil
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
		return nil, fmt.Errorf("%w: execute failed: %s", ErrGuest, inst.stderr.String())
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

func (inst *instance) free(ctx context.Context, ptr uint32) {
	_, _ = inst.releaseFn.Call(ctx, uint64(ptr))
}

func (inst *instance) close() {
	_ = inst.mod.Close(context.Background())
}

// sleeper is the Guest's nanosleep: a real sleep that ends when ctx is done.
func sleeper(ctx context.Context) sys.Nanosleep {
	return func(ns int64) {
		if ns <= 0 {
			return
		}
		timer := time.NewTimer(time.Duration(ns))
		defer timer.Stop()
		select {
		case <-timer.C:
		case <-ctx.Done():
		}
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

func (c *capture) String() string { return string(c.buf) }
