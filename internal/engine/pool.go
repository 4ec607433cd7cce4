package engine

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// pool keeps instances started from the image ready for runs. An instance
// that ran cleanly is reset to the image and put back; one that trapped, timed
// out, grew its memory or left a file open is closed, and a replacement is
// made in the background.
//
// The reset happens on the goroutine that ends the run, and the Guest reset
// last is the first handed out again: its pages are then still in the cache
// of the core that ran it and reset it. A reset in the background, beside the
// next run on another Guest, made that run up to twice as slow as on a Guest
// just reset in place (docs/performance.md, "Where an empty run's time goes").
type pool struct {
	e      *Engine
	size   int
	mu     sync.Mutex
	ready  []*Instance   // a stack: the Guest put back last on top
	closed bool          // close took the ready Guests: put closes what it is given
	back   chan struct{} // a token each time a Guest goes back, for get's wait
	wanted chan struct{} // one token per instance the pool is short of
	wg     sync.WaitGroup
	resets atomic.Int32 // instances being reset now
}

func newPool(e *Engine, size int) *pool {
	p := &pool{e: e, size: size, back: make(chan struct{}, size), wanted: make(chan struct{}, size)}
	for i := 0; i < size; i++ {
		p.wanted <- struct{}{}
	}
	p.wg.Add(1)
	go p.refill()
	return p
}

// refill makes instances while the pool is short of them, until the Runner closes.
func (p *pool) refill() {
	defer p.wg.Done()
	for {
		select {
		case <-p.e.closing.Done():
			return
		case <-p.wanted:
		}
		inst, err := p.e.newInstance(p.e.closing, p.e.image, 0)
		if err != nil {
			// The next run makes its own; the pool asks again a little
			// later, so that a passing failure does not shrink it for good.
			p.wantLater()
			continue
		}
		p.offer(inst, false)
	}
}

// offer puts inst on top of the ready Guests or, when the pool is full or
// closed, closes it. top false puts it at the bottom instead: a new Guest,
// none of whose pages is in a cache yet.
func (p *pool) offer(inst *Instance, top bool) {
	p.mu.Lock()
	if p.closed || len(p.ready) >= p.size {
		p.mu.Unlock()
		inst.Close()
		return
	}
	if top {
		p.ready = append(p.ready, inst)
	} else {
		p.ready = append(p.ready, nil)
		copy(p.ready[1:], p.ready)
		p.ready[0] = inst
	}
	p.mu.Unlock()
	select {
	case p.back <- struct{}{}:
	default:
	}
}

// take returns the Guest on top of the ready ones, or nil.
func (p *pool) take() *Instance {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.ready)
	if n == 0 {
		return nil
	}
	inst := p.ready[n-1]
	p.ready[n-1] = nil
	p.ready = p.ready[:n-1]
	return inst
}

// readyCount is how many Guests wait in the pool.
func (p *pool) readyCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.ready)
}

// resetWait is how long get waits for an instance being reset (a reset takes
// about a tenth of a millisecond) before it makes a new one.
const resetWait = 2 * time.Millisecond

// get returns a ready instance, waits briefly for one being reset, or makes one.
func (p *pool) get(ctx context.Context) (*Instance, error) {
	if inst := p.take(); inst != nil {
		return inst, nil
	}
	if p.resets.Load() > 0 {
		timer := time.NewTimer(resetWait)
		defer timer.Stop()
		for {
			select {
			case <-p.back:
				if inst := p.take(); inst != nil {
					return inst, nil
				} // another get took it first: wait on
			case <-timer.C:
				return p.e.newInstance(ctx, p.e.image, 0)
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
	}
	return p.e.newInstance(ctx, p.e.image, 0)
}

// put takes back an instance after a run; clean says the run ended without a
// trap or a stop. The pool keeps it when it can be reset to the image (and the
// pool is not full); otherwise it is closed and a replacement asked for. The
// reset happens here, on the caller's goroutine, before the run is over.
func (p *pool) put(inst *Instance, clean bool) {
	if !clean || !inst.reusable() {
		inst.Close()
		p.want()
		return
	}
	p.resets.Add(1)
	err := inst.Reset()
	p.resets.Add(-1)
	if err != nil || p.e.closing.Err() != nil {
		inst.Close()
		p.want()
		return
	}
	p.offer(inst, true) // closed when the pool is full: an extra instance made while it was empty
}

// refillBackoff is how long the pool waits before it tries again to make a
// Guest it failed to make.
const refillBackoff = 100 * time.Millisecond

// wantLater asks for one more instance after refillBackoff, unless the
// engine closes first.
func (p *pool) wantLater() {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		timer := time.NewTimer(refillBackoff)
		defer timer.Stop()
		select {
		case <-timer.C:
			p.want()
		case <-p.e.closing.Done():
		}
	}()
}

// want asks the refiller for one more instance.
func (p *pool) want() {
	select {
	case p.wanted <- struct{}{}:
	default:
	}
}

// close waits for the refiller (the Runner is closing) and closes every ready instance.
func (p *pool) close() {
	p.wg.Wait()
	p.mu.Lock()
	ready := p.ready
	p.ready, p.closed = nil, true
	p.mu.Unlock()
	for _, inst := range ready {
		inst.Close()
	}
}
