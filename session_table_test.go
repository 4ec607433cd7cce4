package spine

// White-box tests of the session table (its sweep, on a clock of the test's
// own) and of a session's turn.

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestSessionIdleAndTTL sweeps with a clock of its own: idle sessions
// hibernate, and expire after their time to live.
func TestSessionIdleAndTTL(t *testing.T) {
	// No sweeper: the test sweeps, with its own clock.
	r := newRunner(t, testManifest(), &Options{PoolSize: -1, Sessions: SessionOptions{Idle: -1}})
	r.sessions.opts.Idle, r.sessions.opts.TTL = time.Hour, 24*time.Hour
	var mu sync.Mutex
	now := time.Unix(1e9, 0)
	r.sessions.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) time.Time { mu.Lock(); defer mu.Unlock(); now = now.Add(d); return now }

	a, b := newSession(t, r), newSession(t, r)
	step(t, a, "x = 'a'")
	step(t, b, "x = 'b'")
	r.sessions.sweep(advance(30 * time.Minute))
	if st := r.SessionStats(); st.Live != 2 {
		t.Fatalf("after 30 minutes: %+v", st)
	}
	step(t, b, "x") // b is used: idle again from now
	r.sessions.sweep(advance(45 * time.Minute))
	if st := r.SessionStats(); st.Live != 1 || st.Sessions != 2 {
		t.Fatalf("a idle 75 minutes, b 45: %+v", st)
	}
	if got := step(t, a, "x"); got != `"a"` { // wakes
		t.Fatalf("a woke with %s", got)
	}
	r.sessions.sweep(advance(23*time.Hour + 30*time.Minute))
	if st := r.SessionStats(); st.Sessions != 1 || st.Live != 0 {
		t.Fatalf("b unused for 24h15m, a for 23h30m: %+v", st)
	}
	if _, err := b.Run(context.Background(), Request{Source: "x"}); !errors.Is(err, ErrSessionClosed) || !strings.Contains(err.Error(), "time to live") {
		t.Fatalf("b after its TTL: %v", err)
	}
	if got := step(t, a, "x"); got != `"a"` {
		t.Fatalf("a: %s", got)
	}
}

// TestSessionCloseCtxEnded: a Close whose ctx ends before it has the turn is
// finished by the next operation, which says the session is closed.
func TestSessionCloseCtxEnded(t *testing.T) {
	ctx := context.Background()
	r := newRunner(t, testManifest(), &Options{PoolSize: -1})
	s := newSession(t, r)
	<-s.turn // an operation holds the session
	ended, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.Close(ended); !errors.Is(err, context.Canceled) {
		t.Fatalf("Close: %v", err)
	}
	s.turn <- struct{}{}
	if _, err := s.Run(ctx, Request{Source: "1"}); !errors.Is(err, ErrSessionClosed) {
		t.Fatalf("Run after the half-done Close: %v", err)
	}
	if st := r.SessionStats(); st.Sessions != 0 || st.Live != 0 {
		t.Fatalf("stats %+v", st)
	}
}
