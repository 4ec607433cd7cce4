package fleet

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/spine-run/spine"
)

// Places (Options.Places): a session Attach serves takes a place while it
// has a live spine.Session. Past the cap, a session that needs one takes
// the place of another that no operation holds: one of its own client's
// when its client is past its own cap (Options.PlacesOf), else one of the
// client holding the most places, so that a client opening many sessions
// puts aside its own, never another's while it holds more than they do;
// used least recently first (Attach uses it). The session that gives up
// its place is put aside (PutAside): written to the store if the store
// lacks its state, and without a store closed, its state lost, which its
// next operation is told (Session.Lost).

// FullError is a session that found no place among Options.Places: every
// session whose place it could take is running.
type FullError struct {
	Limit int  // the cap it met: Options.Places, or its client's (Own)
	Own   bool // its client's own cap (Options.PlacesOf)
}

func (e *FullError) Error() string {
	if e.Own {
		return fmt.Sprintf("%v: the client's %d sessions, the most it may keep live, are all running", spine.ErrTooManySessions, e.Limit)
	}
	return fmt.Sprintf("%v: all %d live sessions are running", spine.ErrTooManySessions, e.Limit)
}

// Is makes a FullError spine.ErrTooManySessions.
func (e *FullError) Is(target error) bool { return target == spine.ErrTooManySessions }

// EvictedError is why a session lost its live state: it was put aside to
// make room for another session (Options.Places), and there is no store to
// keep it, or its write to the store failed (Err).
type EvictedError struct {
	Limit int   // the cap it made room under: Options.Places, or its client's (Own)
	Own   bool  // it made room for a newer session of its own client
	Err   error // the write to the store that failed; nil without a store
}

func (e *EvictedError) Error() string {
	msg := fmt.Sprintf("the session was put aside to make room for another (at most %d live)", e.Limit)
	if e.Err != nil {
		msg += "; writing it to the session store failed: " + e.Err.Error()
	}
	return msg
}
func (e *EvictedError) Unwrap() error { return e.Err }

// Lost returns why e's live state was lost under it since Lost was last
// called, nil when it was not: put aside to make room without a store, or
// with a write that failed (*EvictedError); or, for a session Attach made
// without a store, its live session no longer able to run (closed by its
// Runner, or left broken by a run: spine.ErrSessionClosed,
// spine.ErrSessionLost, with the error of the run that found it so), which
// its next Run replaced by a new one. Fresh forgets it. The caller holds
// e's lock.
func (e *Session) Lost() error {
	err := e.lost
	e.lost = nil
	return err
}

// limited reports whether the Fleet caps places at all.
func (f *Fleet) limited() bool { return f.opts.Places > 0 || f.opts.PlacesOf != nil }

// clientKey is e's client among places: its own session's when it has
// none.
func (e *Session) clientKey() string {
	if e.client == "" {
		return "session " + e.id
	}
	return "client " + e.client
}

// placesOf is the cap of client's places (Options.PlacesOf); 0: none.
func (f *Fleet) placesOf(client string) int {
	if f.opts.PlacesOf == nil {
		return 0
	}
	return f.opts.PlacesOf(client)
}

// place gives e, which is about to get a live session, a place, putting
// aside another session for it when there is none free; a *FullError
// when every candidate is running. The caller holds e's lock.
func (f *Fleet) place(e *Session) error {
	if !e.create || !f.limited() {
		return nil
	}
	for {
		f.mu.Lock()
		if e.placed {
			f.mu.Unlock()
			return nil
		}
		limit, key := f.placesOf(e.client), e.clientKey()
		own := limit > 0 && f.byClient[key] >= limit
		if !own && (f.opts.Places <= 0 || f.placed < f.opts.Places) {
			e.placed = true
			f.placed++
			f.byClient[key]++
			f.mu.Unlock()
			return nil
		}
		type idle struct {
			e          *Session
			held, used uint64
		}
		var others []idle
		for _, o := range f.byID {
			if o.placed && o != e && (!own || o.clientKey() == key) {
				others = append(others, idle{o, uint64(f.byClient[o.clientKey()]), o.used})
			}
		}
		f.mu.Unlock()
		slices.SortFunc(others, func(a, b idle) int {
			return cmp.Or(cmp.Compare(b.held, a.held), cmp.Compare(a.used, b.used))
		})
		full := &FullError{Limit: f.opts.Places}
		if own {
			full = &FullError{Limit: limit, Own: true}
		}
		freed := false
		for _, o := range others {
			if freed = f.evict(o.e, full); freed {
				break
			}
		}
		if !freed {
			return full
		}
	}
}

// evict puts o aside for another session's place under the cap full
// names, unless an operation holds it; it reports whether a place may
// have come free.
func (f *Fleet) evict(o *Session, full *FullError) bool {
	if !o.TryLock() {
		return false
	}
	defer o.Unlock()
	f.mu.Lock()
	placed := o.placed
	f.mu.Unlock()
	if !placed {
		return true // its place came free meanwhile: look again
	}
	ctx, cancel := f.storeCtx(context.Background())
	defer cancel()
	err := f.PutAside(ctx, o)
	if f.opts.Store == nil || err != nil {
		o.lost = &EvictedError{Limit: full.Limit, Own: full.Own, Err: err}
	}
	return true
}

// unplace gives back e's place; f.mu is held.
func (f *Fleet) unplace(e *Session) {
	if !e.placed {
		return
	}
	e.placed = false
	f.placed--
	key := e.clientKey()
	if f.byClient[key]--; f.byClient[key] <= 0 {
		delete(f.byClient, key)
	}
}

// unplaceIdle gives back e's place if it has no live session (its load
// or open failed); the caller holds e's lock.
func (f *Fleet) unplaceIdle(e *Session) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if e.s == nil {
		f.unplace(e)
	}
}
