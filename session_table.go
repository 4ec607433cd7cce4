package spine

import (
	"container/list"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	"github.com/spine-run/spine/internal/engine"
)

// sessions is a Runner's table of sessions: every open one, the live ones in
// the order they were used, the bytes hibernated ones keep in memory, and the
// sweeper that hibernates and ends idle ones.
type sessions struct {
	opts SessionOptions // the Runner's, completed

	mu     sync.Mutex
	all    map[*Session]struct{}
	frozen int64      // bytes of the snapshots hibernated sessions keep in memory
	live   *list.List // sessions with a live Guest, least recently used first
	now    func() time.Time
	wg     sync.WaitGroup // the sweeper
}

func newSessions(opts SessionOptions) *sessions {
	return &sessions{opts: opts, all: map[*Session]struct{}{}, live: list.New(), now: time.Now}
}

// hold counts n more bytes of snapshots kept in memory (n < 0: fewer),
// unless that would take them past HibernatedMemory (when n > 0): then it
// reports false.
func (t *sessions) hold(n int) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n > 0 && uint64(t.frozen)+uint64(n) > t.opts.HibernatedMemory {
		return false
	}
	t.frozen += int64(n)
	return true
}

// add makes a session of r, counted against SessionOptions.Max, holding its
// turn and without a Guest.
func (t *sessions) add(r *Runner) (*Session, error) {
	id := make([]byte, 16)
	rand.Read(id)
	s := &Session{r: r, id: hex.EncodeToString(id), turn: make(chan struct{}, 1)}
	s.closing, s.stop = context.WithCancel(r.closing) // made holding its turn: the token is not in turn
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.all) >= t.opts.Max {
		s.stop()
		return nil, fmt.Errorf("%w: the Runner holds %d, its limit", ErrTooManySessions, len(t.all))
	}
	t.all[s] = struct{}{}
	s.used = t.now()
	return s, nil
}

// forget drops s from the table for good.
func (t *sessions) forget(s *Session) {
	t.mu.Lock()
	delete(t.all, s)
	t.mu.Unlock()
}

// admit gives s (holding its turn, without a Guest) the Guest start returns,
// as one of at most SessionOptions.MaxLive live sessions: past the cap, the
// least recently used session that is not running is hibernated first.
func (t *sessions) admit(s *Session, start func() (*engine.Instance, error)) error {
	for {
		t.mu.Lock()
		if t.live.Len() < t.opts.MaxLive {
			s.live = t.live.PushBack(s) // the place is taken before the Guest is made
			t.mu.Unlock()
			break
		}
		var idle []*Session
		for e := t.live.Front(); e != nil; e = e.Next() {
			idle = append(idle, e.Value.(*Session))
		}
		t.mu.Unlock()
		freed := false
		for _, other := range idle {
			if other.hibernateIfIdle() {
				freed = true
				break
			}
		}
		// A session holding files open cannot be hibernated; rather than
		// let such sessions hold every live place for good, the one used
		// least recently is lost.
		for i := 0; !freed && i < len(idle); i++ {
			freed = idle[i].evictIfIdle()
		}
		if !freed {
			return fmt.Errorf("%w: none of the %d live sessions can make room: each is running, or its snapshot would take hibernated sessions past HibernatedMemory", ErrTooManySessions, t.opts.MaxLive)
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

// leaveLive takes s off the live list.
func (t *sessions) leaveLive(s *Session) {
	t.mu.Lock()
	if s.live != nil {
		t.live.Remove(s.live)
		s.live = nil
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
