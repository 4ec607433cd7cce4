package wasmtime

import (
	"crypto/rand"
	"encoding/binary"
	"io"
	mathrand "math/rand/v2"
	"time"

	wt "github.com/bytecodealliance/wasmtime-go/v39"
)

// The WASI functions answered in Go rather than by wasmtime, each for a
// guarantee of the wazero engine that wasmtime's own cannot hold
// (docs/rationale.md, "A second engine on wasmtime"): stdout and stderr
// (fd_write, host.go) into capped captures, sleeps that end with the run
// (poll_oneoff), and an image captured with fixed randomness (random_get).

// WASI's errno values and layouts used here (wasi_snapshot_preview1).
const (
	errnoSuccess = 0
	errnoFault   = 21
	errnoInval   = 28

	subscriptionSize = 48 // userdata u64, tag u8 at 8, clock id u32 at 16, timeout u64 at 24, flags u16 at 40
	eventSize        = 32 // userdata u64, error u16 at 8, type u8 at 10
	eventClock       = 0
	subClockAbstime  = 1
)

// captureSeed seeds the randomness the Guest sees while its image is made,
// so that every Host makes the same image (as internal/engine's does).
var captureSeed = [32]byte{'s', 'p', 'i', 'n', 'e', ' ', 'i', 'm', 'a', 'g', 'e'}

// randomHost is WASI's random_get: the system's randomness, a fixed
// sequence while the image is captured.
func (g *Guest) randomHost(c *wt.Caller, args []wt.Val) ([]wt.Val, *wt.Trap) {
	buf, n := uint32(args[0].I32()), uint32(args[1].I32())
	mem := g.mem.UnsafeData(c)
	if uint64(buf)+uint64(n) > uint64(len(mem)) {
		return []wt.Val{i32(errnoFault)}, nil
	}
	var src io.Reader = rand.Reader
	if g.capture != nil {
		src = g.capture
	}
	if _, err := io.ReadFull(src, mem[buf:buf+n]); err != nil {
		return nil, wt.NewTrap("random_get: " + err.Error())
	}
	return []wt.Val{i32(errnoSuccess)}, nil
}

// newCaptureRandom is the capture's fixed sequence.
func newCaptureRandom() io.Reader { return mathrand.NewChaCha8(captureSeed) }

// pollHost is WASI's poll_oneoff. A poll on relative clocks alone (how the
// Guest's CPython sleeps: select with a timeout, there being no
// clock_nanosleep) waits in Go for the nearest timeout or the run's end,
// whichever comes first, as the wazero engine's nanosleep does: after the
// run's end the next tick stops the Guest. Any other poll goes to wasmtime's.
func (g *Guest) pollHost(c *wt.Caller, args []wt.Val) ([]wt.Val, *wt.Trap) {
	in, out, n, nevents := uint32(args[0].I32()), uint32(args[1].I32()), uint32(args[2].I32()), uint32(args[3].I32())
	mem := g.mem.UnsafeData(c)
	if n == 0 {
		return []wt.Val{i32(errnoInval)}, nil
	}
	if uint64(in)+uint64(n)*subscriptionSize > uint64(len(mem)) ||
		uint64(out)+uint64(n)*eventSize > uint64(len(mem)) || uint64(nevents)+4 > uint64(len(mem)) {
		return []wt.Val{i32(errnoFault)}, nil
	}
	nearest := uint64(0)
	for i := uint32(0); i < n; i++ {
		sub := mem[in+i*subscriptionSize:]
		if sub[8] != eventClock || binary.LittleEndian.Uint16(sub[40:])&subClockAbstime != 0 {
			return g.forwardPoll(c, args)
		}
		if timeout := binary.LittleEndian.Uint64(sub[24:]); i == 0 || timeout < nearest {
			nearest = timeout
		}
	}
	g.sleep(time.Duration(min(nearest, uint64(1<<63-1))))
	mem = g.mem.UnsafeData(c)
	events := uint32(0)
	for i := uint32(0); i < n; i++ {
		sub := mem[in+i*subscriptionSize:]
		if binary.LittleEndian.Uint64(sub[24:]) != nearest {
			continue
		}
		ev := mem[out+events*eventSize : out+(events+1)*eventSize]
		clear(ev)
		copy(ev[0:8], sub[0:8]) // userdata
		ev[10] = eventClock
		events++
	}
	binary.LittleEndian.PutUint32(mem[nevents:], events)
	return []wt.Val{i32(errnoSuccess)}, nil
}

// sleep waits d or until the run's context ends.
func (g *Guest) sleep(d time.Duration) {
	if d <= 0 {
		return
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-g.runCtx.Done():
	}
}

// forwardPoll is wasmtime's own poll_oneoff, through the forwarding module.
func (g *Guest) forwardPoll(c *wt.Caller, args []wt.Val) ([]wt.Val, *wt.Trap) {
	r, err := g.poll.Call(c, args[0].I32(), args[1].I32(), args[2].I32(), args[3].I32())
	if err != nil {
		return nil, wt.NewTrap(err.Error())
	}
	return []wt.Val{wt.ValI32(r.(int32))}, nil
}
