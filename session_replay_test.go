package spine

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
)

// sessionPausing uses the state of the session's earlier runs (x, and
// random's state) and leaves some for its later ones (y); it takes the
// clock and random bytes and calls a Runner's tool and the run's own ask
// before its second ask, where the test takes its record.
const sessionPausing = `
import random, time
pre = [x, random.random(), time.time(), lookup(key="book")]
a = ask(q="first")
b = ask(q="second")
y = [x + 1, b]
result = {"pre": pre, "a": a, "b": b}
`

// TestSessionContinue: a session's run recorded where it waits for its
// second own call, continued from that record in another Runner's session
// restored from the snapshot taken before the run, ends as the run did,
// with no call the record holds made again; the state of the session's
// earlier runs is there, and the session goes on from the run's. The whole
// run's record replays so too (Session.Replay).
func TestSessionContinue(t *testing.T) {
	ctx := context.Background()
	var lookups atomic.Int64
	r := newRunner(t, countingManifest(&lookups), nil)
	sess := newSession(t, r)
	if _, err := sess.Run(ctx, Request{Source: "import random\nrandom.seed(7)\nx = 41"}); err != nil {
		t.Fatal(err)
	}
	before, err := sess.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var asked []int
	var paused *Record
	whole, err := sess.Run(ctx, Request{Source: sessionPausing, Record: true, Tools: askSpec(&asked), Waiting: func(w ToolWait) {
		if w.Call == 2 {
			paused = w.Record
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	if paused == nil || paused.Session == nil || len(paused.Calls) != 2 {
		t.Fatalf("the record at the second ask: %+v", paused)
	}
	encoded, err := paused.Encode()
	if err != nil {
		t.Fatal(err)
	}
	rec, err := ParseRecord(encoded)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Continue(ctx, rec, Request{Tools: askSpec(&asked)}); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("Runner.Continue of a session's record: %v, want ErrBadRequest", err)
	}

	var lookups2 atomic.Int64
	r2 := newRunner(t, countingManifest(&lookups2), nil)
	sess2, err := r2.Restore(ctx, before)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sess2.Close(ctx) })
	var asked2 []int
	out, err := sess2.Continue(ctx, rec, Request{Record: true, Tools: askSpec(&asked2)})
	if err != nil {
		t.Fatal(err)
	}
	sameOutput(t, whole, out)
	if got := fmt.Sprint(lookups2.Load(), asked2); got != "0 [2]" {
		t.Fatalf("continuation: lookups and asks %s, want 0 [2]", got)
	}
	if out.Record == nil || out.Record.Session == nil || len(out.Record.Calls) != len(whole.Record.Calls) {
		t.Fatalf("the continuation's record: %+v", out.Record)
	}
	// The whole run's record replays in a third session from the same
	// snapshot, calling nothing.
	sess3, err := r2.Restore(ctx, before)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sess3.Close(ctx) })
	replayed, err := sess3.Replay(ctx, whole.Record, nil)
	if err != nil {
		t.Fatal(err)
	}
	sameOutput(t, whole, replayed)
	if lookups2.Load() != 0 || len(asked2) != 1 {
		t.Fatalf("the replay called tools: %d lookups, asks %v", lookups2.Load(), asked2)
	}
	next := func(s *Session) string {
		out, err := s.Run(ctx, Request{Source: "import random\nresult = [y, random.random()]"})
		if err != nil {
			t.Fatal(err)
		}
		return string(out.Value)
	}
	if a, b, c := next(sess), next(sess2), next(sess3); a != b || a != c {
		t.Fatalf("the sessions after the run differ: %s, %s and %s", a, b, c)
	}
}

// TestSessionContinueRefused: a session continues only a session's
// record of its Runner's image; in a session of another state the run
// does not end as it did (here: x is not defined).
func TestSessionContinueRefused(t *testing.T) {
	ctx := context.Background()
	r := newRunner(t, testManifest(), nil)
	var asked []int
	var plain, inSession *Record
	take := func(to **Record) func(ToolWait) {
		return func(w ToolWait) {
			if w.Call == 1 {
				*to = w.Record
			}
		}
	}
	recordRun(t, r, Request{Source: pausingProgram, Record: true, Tools: askSpec(&asked), Waiting: take(&plain)})
	sess := newSession(t, r)
	if _, err := sess.Run(ctx, Request{Source: "x = 1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := sess.Run(ctx, Request{Source: sessionPausing, Record: true, Tools: askSpec(&asked), Waiting: take(&inSession)}); err != nil {
		t.Fatal(err)
	}
	if err := r.CheckSessionRecord(plain); !errors.Is(err, ErrBadRequest) {
		t.Errorf("a record outside a session: %v, want ErrBadRequest", err)
	}
	other := *inSession
	other.Session = &RecordSession{Image: "another", ID: other.Session.ID}
	if _, err := newSession(t, r).Continue(ctx, &other, Request{Tools: askSpec(&asked)}); !errors.Is(err, ErrDiverged) {
		t.Errorf("a record of another image: %v, want ErrDiverged", err)
	}
	// A fresh session has no x: the program does not reach its first call.
	fresh := newSession(t, r)
	if _, err := fresh.Continue(ctx, inSession, Request{Tools: askSpec(&asked)}); err == nil {
		t.Error("a session of another state continued the run")
	}
}
