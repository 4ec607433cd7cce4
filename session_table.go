package spine

import (
	"container/list"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/spine-run/spine/internal/engine"
)

// sessions is a Runner's table of sessions: every open one, the live ones in
// the order they were used, the bytes hibernated ones keep in memory and in
// SessionOptions.Dir, and the sweeper that hibernates and ends idle ones.
// Each session counts against its tenant's share too (tenant.go).
type sessions struct {
	opts SessionOptions // the Runner's, completed

	mu     sync.Mutex
	all    map[*Session]struct{}
	frozen int64      // bytes of the snapshots hibernated sessions keep in memory
	disk   int64      // bytes of the snapshots hibernated sessions keep in SessionOptions.Dir
	live   *list.List // sessions with a live Guest, least recently used first
	now    func() time.Time
	wg     sync.WaitGroup // the sweeper
}

func newSessions(opts SessionOptions) *sessions {
	return &sessions{opts: opts, all: map[*Session]struct{}{}, live: list.New(), now: time.Now}
}

// holdFrozen counts n more bytes of s's snapshots kept in memory (n < 0:
// fewer), unless that would take the Runner's past HibernatedMemory or s's
// tenant's past its share (when n > 0): then it reports false.
func (t *sessions) holdFrozen(s *Session, n int64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n > 0 && (uint64(t.frozen)+uint64(n) > t.opts.HibernatedMemory || !s.tenant.roomFrozen(n)) {
		return false
	}
	t.frozen += n
	s.tenant.addFrozen(n)
	return true
}

// diskRoom is how many more bytes of snapshots in SessionOptions.Dir the
// Runner (DirBytes) and s's tenant have room for.
func (t *sessions) diskRoom(s *Session) int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	room := int64(t.opts.DirBytes) - t.disk
	if ten := s.tenant; ten != nil && ten.limits.DirBytes > 0 {
		room = min(room, int64(ten.limits.DirBytes)-ten.disk)
	}
	return room
}

// holdDisk is holdFrozen for the snapshots in SessionOptions.Dir, against
// DirBytes.
func (t *sessions) holdDisk(s *Session, n int64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n > 0 && (uint64(t.disk)+uint64(n) > t.opts.DirBytes || !s.tenant.roomDisk(n)) {
		return false
	}
	t.disk += n
	s.tenant.addDisk(n)
	return true
}

// add makes a session of r, counted against SessionOptions.Max and
// tenant's share (nil: none), holding its turn and without a Guest.
func (t *sessions) add(r *Runner, tenant *Tenant) (*Session, error) {
	id := make([]byte, 16)
	rand.Read(id)
	s := &Session{r: r, tenant: tenant, id: hex.EncodeToString(id), turn: make(chan struct{}, 1)}
	s.closing, s.stop = context.WithCancel(r.closing) // made holding its turn: the token is not in turn
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.all) >= t.opts.Max {
		s.stop()
		return nil, fmt.Errorf("%w: the Runner holds %d, its limit", ErrTooManySessions, len(t.all))
	}
	if err := tenant.refuseSession(); err != nil {
		s.stop()
		return nil, err
	}
	tenant.addSessions(1)
	t.all[s] = struct{}{}
	s.used = t.now()
	return s, nil
}

// open adds a session of r to the table, in tenant's share (nil: none),
// with the Guest start returns.
func (t *sessions) open(r *Runner, tenant *Tenant, start func() (*engine.Instance, error)) (*Session, error) {
	s, err := t.add(r, tenant)
	if err != nil {
		return nil, err
	}
	if err := t.admit(s, start); err != nil {
		s.stop()
		t.forget(s)
		switch {
		case r.closing.Err() != nil:
			return nil, ErrClosed
		case errors.Is(err, ErrTooManySessions) || errors.Is(err, ErrGuest) || errors.Is(err, ErrArtifact) || errors.Is(err, ErrSnapshot):
			return nil, err
		}
		return nil, fmt.Errorf("%w: %v", ErrGuest, err)
	}
	s.give()
	return s, nil
}

// forget drops s from the table for good.
func (t *sessions) forget(s *Session) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.all[s]; ok {
		delete(t.all, s)
		s.tenant.addSessions(-1)
	}
}

// admit gives s (holding its turn, without a Guest) the Guest start returns,
// as one of at most SessionOptions.MaxLive live sessions and of its
// tenant's share: past the Runner's cap, the least recently used session
// that is not running is hibernated first; past the tenant's, the least
// recently used of the tenant's own.
func (t *sessions) admit(s *Session, start func() (*engine.Instance, error)) error {
	for {
		t.mu.Lock()
		own := s.tenant.liveFull()
		if !own && t.live.Len() < t.opts.MaxLive {
			s.live = t.live.PushBack(s) // the place is taken before the Guest is made
			s.tenant.addLive(1)
			t.mu.Unlock()
			break
		}
		var idle []*Session
		for e := t.live.Front(); e != nil; e = e.Next() {
			if other := e.Value.(*Session); !own || other.tenant == s.tenant {
				idle = append(idle, other)
			}
		}
		t.mu.Unlock()
		if !makeRoom(idle) {
			if own {
				return fmt.Errorf("%w: none of the %d live sessions of %s (its limit) can make room: each is running, or its snapshot would take its hibernated sessions past its HibernatedMemory or DirBytes", ErrTooManySessions, s.tenant.limits.Live, s.tenant.label())
			}
			return fmt.Errorf("%w: none of the %d live sessions can make room: each is running, or its snapshot would take hibernated sessions past HibernatedMemory or DirBytes", ErrTooManySessions, t.opts.MaxLive)
		}
	}
	inst, err := start()
	if err != nil {
		t.leaveLive(s)
		return err
	}
	s.inst = inst
	return nil
}

// makeRoom frees a live place by hibernating the first of idle that can be,
// least recently used first, and reports whether it did. A session holding
// files open cannot be hibernated; rather than let such sessions hold every
// live place for good, the one used least recently is lost.
func makeRoom(idle []*Session) bool {
	for _, other := range idle {
		if other.hibernateIfIdle() {
			return true
		}
	}
	for _, other := range idle {
		if other.evictIfIdle() {
			return true
		}
	}
	return false
}

// leaveLive takes s off the live list.
func (t *sessions) leaveLive(s *Session) {
	t.mu.Lock()
	if s.live != nil {
		t.live.Remove(s.live)
		s.live = nil
		s.tenant.addLive(-1)
	}
	t.mu.Unlock()
}

// used marks s used now, the most recently of the live sessions.
func (t *sessions) used(s *Session) {
	t.mu.Lock()
	s.used = t.now()
	if s.live != nil {
		t.live.MoveToBack(s.live)
	}
	t.mu.Unlock()
}

// unusedFor is how long, as of now, s has gone unused.
func (t *sessions) unusedFor(s *Session, now time.Time) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	return now.Sub(s.used)
}

// SessionStats counts a Runner's sessions.
type SessionStats struct {
	Sessions int // open sessions, live and hibernated
	Live     int // sessions with a live Guest
}

// SessionStats returns the Runner's session counts.
func (r *Runner) SessionStats() SessionStats {
	t := r.sessions
	t.mu.Lock()
	defer t.mu.Unlock()
	return SessionStats{Sessions: len(t.all), Live: t.live.Len()}
}

// sweep hibernates the sessions idle past SessionOptions.Idle and closes those
// idle past SessionOptions.TTL, as of now. Sessions in use are left for the
// next sweep.
func (t *sessions) sweep(now time.Time) {
	t.mu.Lock()
	var expired, idle []*Session
	for s := range t.all {
		unused := now.Sub(s.used)
		switch {
		case t.opts.TTL > 0 && unused >= t.opts.TTL:
			expired = append(expired, s)
		case t.opts.Idle > 0 && unused >= t.opts.Idle && s.live != nil:
			idle = append(idle, s)
		}
	}
	t.mu.Unlock()
	for _, s := range expired {
		select {
		case <-s.turn:
			if t.unusedFor(s, now) >= t.opts.TTL { // not used since it was chosen
				s.end(fmt.Errorf("%w: unused for %v, its time to live", ErrSessionClosed, t.opts.TTL))
			}
			s.turn <- struct{}{}
		default:
		}
	}
	for _, s := range idle {
		if t.unusedFor(s, now) >= t.opts.Idle {
			s.hibernateIfIdle()
		}
	}
}

// startSweeper sweeps the sessions every so often (SessionOptions) until
// closing is done; closeAll waits for it.
func (t *sessions) startSweeper(closing context.Context) {
	every := t.opts.sweepEvery()
	if every <= 0 {
		return
	}
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		ticker := time.NewTicker(every)
		defer ticker.Stop()
		for {
			select {
			case <-closing.Done():
				return
			case <-ticker.C:
				t.sweep(t.now())
			}
		}
	}()
}

// closeAll ends every session with why; the Runner is closing and no
// operation is in flight.
func (t *sessions) closeAll(why error) {
	t.wg.Wait()
	t.mu.Lock()
	all := make([]*Session, 0, len(t.all))
	for s := range t.all {
		all = append(all, s)
	}
	t.mu.Unlock()
	for _, s := range all {
		<-s.turn
		s.end(why)
		s.turn <- struct{}{}
	}
}
