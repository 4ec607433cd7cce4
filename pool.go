package spine

import (
	"context"
	"sync"
)

// pool keeps instances started from the image ready for runs. An instance
// that ran cleanly is reset to the image and put back; one that trapped, timed
// out, grew its memory or left a file open is closed, and a replacement is
// made in the background.
type pool struct {
	r      *Runner
	img    *image
	ready  chan *instance
	wanted chan struct{} // one token per instance the pool is short of
	wg     sync.WaitGroup
}

func newPool(r *Runner, img *image, size int) *pool {
	p := &pool{r: r, img: img, ready: make(chan *instance, size), wanted: make(chan struct{}, size)}
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
		case <-p.r.closing.Done():
			return
		case <-p.wanted:
		}
		inst, err := p.r.newInstance(p.r.closing, p.img)
		if err != nil {
			continue // the next run makes its own; the pool tries again when asked
		}
		select {
		case p.ready <- inst:
		default:
			inst.close()
		}
	}
}

// get returns a ready instance, or makes one when none is waiting.
func (p *pool) get(ctx context.Context) (*instance, error) {
	select {
	case inst := <-p.ready:
		return inst, nil
	default:
	}
	return p.r.newInstance(ctx, p.img)
}

// put takes back an instance after a run; clean says the run ended without a
// trap or a stop. The pool keeps it when it can be reset to the image (and the
// pool is not full); otherwise it is closed and a replacement asked for.
func (p *pool) put(inst *instance, clean bool) {
	if clean && inst.reusable() && inst.reset() == nil && p.r.closing.Err() == nil {
		select {
		case p.ready <- inst:
			return
		default: // an extra instance made while the pool was empty
			inst.close()
			return
		}
	}
	inst.close()
	p.want()
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
			inst.close()
		default:
			return
		}
	}
}
