package spine

import (
	"context"
	"io"
	"sync"

	"github.com/spine-run/spine/internal/engine"
)

// forwardPending is how many bytes of a stream may wait for its writer. Past
// it the Guest's next write waits for the writer to catch up (or the run's
// ctx to end): a slow writer slows the program, never grows the Host's memory.
const forwardPending = 64 << 10

// forwarder hands what the Guest writes to one of Request.Stdout and
// Request.Stderr as the program runs. The Guest's writes only append to a
// bounded buffer; a goroutine of its own calls the writer, so a writer that
// blocks holds up neither the Guest past its ctx nor Run past the run's end.
// The first error from the writer stops forwarding for the rest of the run.
type forwarder struct {
	w   io.Writer
	ctx context.Context // the run's: when it ends the Guest stops waiting for room

	mu      sync.Mutex
	pending []byte
	spare   []byte
	closing bool // the run has ended: write what is pending, then stop
	stopped bool // forward nothing more: the writer failed, or the run's ctx ended
	wake    chan struct{}
	room    chan struct{}
	done    chan struct{} // closed when the goroutine returns
}

func newForwarder(ctx context.Context, w io.Writer) *forwarder {
	f := &forwarder{w: w, ctx: ctx, wake: make(chan struct{}, 1), room: make(chan struct{}, 1), done: make(chan struct{})}
	go f.loop()
	return f
}

// Write is the Guest's write (through the capture's tee). It never fails: the
// capture is the run's record, forwarding is a copy.
func (f *forwarder) Write(p []byte) (int, error) {
	f.mu.Lock()
	for !f.stopped && len(f.pending) > 0 && len(f.pending)+len(p) > forwardPending {
		f.mu.Unlock()
		select {
		case <-f.room:
		case <-f.done: // the writer failed
		case <-f.ctx.Done():
			f.mu.Lock()
			f.stopped = true
			f.mu.Unlock()
			return len(p), nil
		}
		f.mu.Lock()
	}
	if !f.stopped {
		f.pending = append(f.pending, p...)
		signal(f.wake)
	}
	f.mu.Unlock()
	return len(p), nil
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

func (f *forwarder) loop() {
	defer close(f.done)
	for {
		f.mu.Lock()
		for !f.stopped && len(f.pending) == 0 && !f.closing {
			f.mu.Unlock()
			<-f.wake
			f.mu.Lock()
		}
		if f.stopped || len(f.pending) == 0 { // stopped, or closing with nothing left
			f.mu.Unlock()
			return
		}
		chunk := f.pending
		f.pending, f.spare = f.spare[:0], nil
		f.mu.Unlock()
		signal(f.room)

		_, err := f.w.Write(chunk)

		f.mu.Lock()
		f.spare = chunk[:0]
		if err != nil {
			f.stopped = true
		}
		f.mu.Unlock()
	}
}

// finish ends forwarding when the run has ended: it waits for the writer to
// take everything pending, unless ctx ends first; then what is still pending
// is dropped, and a Write in progress may return after finish (no other
// starts).
func (f *forwarder) finish(ctx context.Context) {
	f.mu.Lock()
	f.closing = true
	if ctx.Err() != nil {
		f.stopped = true
	}
	f.mu.Unlock()
	signal(f.wake)
	select {
	case <-f.done:
	case <-ctx.Done():
		f.mu.Lock()
		f.stopped = true
		f.mu.Unlock()
		signal(f.wake)
	}
}

// forward tees inst's output to req.Stdout and req.Stderr for this run, and
// returns what ends it.
func forward(ctx context.Context, inst *engine.Instance, req Request) (stop func()) {
	if req.Stdout == nil && req.Stderr == nil {
		return func() {}
	}
	var stdout, stderr *forwarder
	var out, errOut io.Writer // nil unless forwarded: no typed nil in an interface
	if req.Stdout != nil {
		stdout = newForwarder(ctx, req.Stdout)
		out = stdout
	}
	if req.Stderr != nil {
		stderr = newForwarder(ctx, req.Stderr)
		errOut = stderr
	}
	inst.Tee(out, errOut)
	return func() {
		inst.Tee(nil, nil)
		for _, f := range []*forwarder{stdout, stderr} {
			if f != nil {
				f.finish(ctx)
			}
		}
	}
}
