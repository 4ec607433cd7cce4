package fleet

import (
	"context"
	"crypto/subtle"
	"fmt"

	"github.com/spine-run/spine"
)

// A Session is a session the Fleet serves: a spine.Session under an id,
// with its owner and, with a store, its place in the store's line of
// generations.
type Session struct {
	id    string
	owner string
	f     *Fleet
	turn  chan struct{} // holds a token while no operation has the lock

	// Attach's: the client it counts among (Options.PlacesOf; "" for its
	// own), and whether it stays in the table until Delete, live or not
	// (without a store: its next Run makes a new live session, and Lost
	// says what became of the last).
	client string
	keep   bool

	// Owned by whoever holds the lock.
	s       *spine.Session // the live session; nil while put aside, or not loaded yet (Attach)
	create  bool           // Attach: a session the store lacks is made, not refused
	gen     uint64         // the generation in the store the live state descends from; 0: none yet
	dirty   bool           // the live state has runs the store lacks
	stale   bool           // the live state is not the store's line (a lost race, an undone run): load
	pending chan struct{}  // closed when a write after answering ends
	broke   error          // the error of the run that left the live session unable to run (keep)
	lost    error          // why its live state was lost under it, for Lost

	// Guarded by Fleet.mu.
	busy   int    // operations holding it now (Get, Load, Attach until Release)
	placed bool   // it holds a place (Options.Places)
	used   uint64 // Fleet.uses when Attach last took it
}

// ID returns the session's id.
func (e *Session) ID() string { return e.id }

// Owner returns who the session belongs to.
func (e *Session) Owner() string { return e.owner }

// Spine returns the live spine.Session, nil while there is none; the
// caller holds the lock.
func (e *Session) Spine() *spine.Session { return e.s }

// Live reports whether the session has a live spine.Session; the caller
// holds the lock.
func (e *Session) Live() bool { return e.s != nil }

// Lock waits until no other operation has the session, or ctx ends (a
// *TurnError). Unlock gives it back.
func (e *Session) Lock(ctx context.Context) error {
	select {
	case <-e.turn:
		return nil
	default:
	}
	e.f.opts.OnWait(true)
	defer e.f.opts.OnWait(false)
	select {
	case <-e.turn:
		return nil
	case <-ctx.Done():
		return &TurnError{ctx.Err()}
	}
}

// TryLock takes the lock if no operation has it.
func (e *Session) TryLock() bool {
	select {
	case <-e.turn:
		return true
	default:
		return false
	}
}

// Unlock ends an operation's hold of the lock.
func (e *Session) Unlock() { e.turn <- struct{}{} }

// ended reports whether the Runner closed e's session (its TTL, say).
func (e *Session) ended() bool {
	if e.s == nil {
		return false
	}
	select {
	case <-e.s.Done():
		return true
	default:
		return false
	}
}

// gone reports whether the Runner closed e's session and e may leave the
// table for it: not a session Attach keeps, whose next Run makes another.
func (e *Session) gone() bool { return !e.keep && e.ended() }

// newSession returns an entry, locked.
func (f *Fleet) newSession(id, owner string, s *spine.Session) *Session {
	return &Session{id: id, owner: owner, f: f, s: s, turn: make(chan struct{}, 1)}
}

// Get returns the session id names for owner, in use until Release:
// ErrNoSession when the Fleet does not hold it (it may be in the store:
// Load), spine.ErrClosed after Close.
func (f *Fleet) Get(id, owner string) (*Session, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, spine.ErrClosed
	}
	e := f.byID[id]
	if e == nil || subtle.ConstantTimeCompare([]byte(e.owner), []byte(owner)) != 1 {
		return nil, ErrNoSession
	}
	if e.busy == 0 && e.gone() {
		f.remove(e)
		return nil, ErrNoSession
	}
	e.busy++
	return e, nil
}

// Release ends an operation's use of e (Get, Load, Attach). A session that
// was put aside and that nothing uses is forgotten: the store holds it
// (one Attach keeps without a store stays until Delete).
func (f *Fleet) Release(e *Session) {
	f.mu.Lock()
	defer f.mu.Unlock()
	e.busy--
	if e.busy == 0 && e.s == nil && !e.keep && f.byID[e.id] == e {
		f.remove(e)
	}
}

// has reports whether e is still in the table.
func (f *Fleet) has(e *Session) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.byID[e.id] == e
}

// Held reports whether e is still the Fleet's: not deleted, expired or
// replaced since it was taken.
func (f *Fleet) Held(e *Session) bool { return f.has(e) }

// Holds reports whether the Fleet holds a session under id that its
// Runner has not closed (live or hibernated), whoever owns it.
func (f *Fleet) Holds(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	e := f.byID[id]
	return e != nil && (e.busy > 0 || !e.gone())
}

// Forget takes e out of the Fleet, if it is there, and closes its live
// session (an error of its own, a session its Runner closed): its next
// operation finds no session, or loads it from the store.
func (f *Fleet) Forget(e *Session) {
	if f.forget(e) && e.s != nil {
		e.s.Close(context.Background())
	}
}

// forget takes e out of the table; it reports whether e was there.
func (f *Fleet) forget(e *Session) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.byID[e.id] != e {
		return false
	}
	f.remove(e)
	return true
}

// remove takes e out of the table; f.mu is held.
func (f *Fleet) remove(e *Session) {
	delete(f.byID, e.id)
	if e.s != nil {
		delete(f.bySpine, e.s)
	}
	if f.perOwner[e.owner]--; f.perOwner[e.owner] <= 0 {
		delete(f.perOwner, e.owner)
	}
	f.unplace(e)
}

// insert adds e to the table; f.mu is held.
func (f *Fleet) insert(e *Session) {
	f.byID[e.id] = e
	if e.s != nil {
		f.bySpine[e.s] = e
	}
	f.perOwner[e.owner]++
}

// add puts e, new, in the table: spine.ErrClosed once the Fleet is closed,
// a *TooManyError past its owner's share, ErrTaken for an id held. It
// first drops the sessions the Runner closed.
func (f *Fleet) add(e *Session) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return spine.ErrClosed
	}
	for _, old := range f.byID {
		if old.busy == 0 && old.gone() {
			f.remove(old)
		}
	}
	if n := f.share(e.owner).Sessions; n > 0 && f.perOwner[e.owner] >= n {
		return &TooManyError{n}
	}
	if old := f.byID[e.id]; old != nil {
		if old.owner != e.owner {
			return ErrTaken
		}
		return fmt.Errorf("%w: the session is in use; try again", ErrTaken)
	}
	f.insert(e)
	return nil
}

// addOrGet puts e, loaded or attached, in the table and returns it in use;
// if another operation put the same id there meanwhile, it returns that
// one instead, in use (or ErrNoSession when another owner holds it).
func (f *Fleet) addOrGet(e *Session) (*Session, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, spine.ErrClosed
	}
	if held := f.byID[e.id]; held != nil && !(held.busy == 0 && held.gone()) {
		if subtle.ConstantTimeCompare([]byte(held.owner), []byte(e.owner)) != 1 {
			return nil, ErrNoSession
		}
		held.busy++
		return held, nil
	} else if held != nil {
		f.remove(held)
	}
	f.insert(e)
	e.busy++
	return e, nil
}

// swap gives e the live session s in place of the one it had, which it
// returns; ok is false when e is no longer in the table.
func (f *Fleet) swap(e *Session, s *spine.Session) (old *spine.Session, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.byID[e.id] != e {
		return nil, false
	}
	if e.s != nil {
		delete(f.bySpine, e.s)
	}
	old, e.s = e.s, s
	if s != nil {
		f.bySpine[s] = e
	} else {
		f.unplace(e)
	}
	return old, true
}

// bySpineSession returns the session whose live spine.Session is s, or nil.
func (f *Fleet) bySpineSession(s *spine.Session) *Session {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.bySpine[s]
}

// closeAll marks the Fleet closed and returns every session it held.
func (f *Fleet) closeAll() []*Session {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	all := make([]*Session, 0, len(f.byID))
	for _, e := range f.byID {
		all = append(all, e)
		f.remove(e)
	}
	return all
}
