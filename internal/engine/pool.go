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
type pool struct {
	e      *Engine
	ready  chan *Instance
	wanted chan struct{} // one token per instance the pool is short of
	wg     sync.WaitGroup
	resets atomic.Int32 // instances being reset in the background
}

func newPool(e *Engine, size int) *pool {
	p := &pool{e: e, ready: make(chan *Instance, size), wanted: make(chan struct{}, size)}
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
		select {
		case p.ready <- inst:
		default:
			inst.Close()
		}
	}
}

// resetWait is how long get waits for an instance being reset (a reset takes
// about a tenth of a millisecond) before it makes a new one.
const resetWait = 2 * time.Millisecond

// get returns a ready instance, waits briefly for one being reset, or makes one.
func (p *pool) get(ctx context.Context) (*Instance, error) {
	select {
	case inst := <-p.ready:
		return inst, nil
	default:
	}
	if p.resets.Load() > 0 {
		timer := time.NewTimer(resetWait)
		defer timer.Stop()
		select {
		case inst := <-p.ready:
			return inst, nil
		case <-timer.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return p.e.newInstance(ctx, p.e.image, 0)
}

// put takes back an instance after a run; clean says the run ended without a
// trap or a stop. The pool keeps it when it can be reset to the image (and the
// pool is not full); otherwise it is closed and a replacement asked for. The
// reset happens in the background, off the path of the run that just ended.
func (p *pool) put(inst *Instance, clean bool) {
	if !clean || !inst.reusable() {
		inst.Close()
		p.want()
		return
	}
	p.wg.Add(1)
	p.resets.Add(1)
	go func() {
		defer p.wg.Done()
		defer p.resets.Add(-1)
		if inst.Reset() != nil || p.e.closing.Err() != nil {
			inst.Close()
			p.want()
			return
		}
		select {
		case p.ready <- inst:
		default: // an extra instance made while the pool was empty
			inst.Close()
		}
	}()
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
	for {
		select {
		case inst := <-p.ready:
			inst.Close()
		default:
			return
		}
	}
}
