package spine

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spine-run/spine/internal/engine"
)

// holdTool is a tool gate() that tells the test a run has reached it and
// holds the run there until the test lets it through (or its ctx ends).
type holdTool struct {
	entered, release chan struct{}
	manifest         Manifest
}

func newHoldTool() *holdTool {
	h := &holdTool{entered: make(chan struct{}, 8), release: make(chan struct{})}
	h.manifest = testManifest()
	h.manifest["gate"] = ToolSpec{Call: func(ctx context.Context, args json.RawMessage) (any, error) {
		h.entered <- struct{}{}
		select {
		case <-h.release:
			return "opened", nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}}
	return h
}

func newSession(t testing.TB, r *Runner) *Session {
	t.Helper()
	s, err := r.NewSession(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

// step runs src in s and returns its value, failing the test on any error.
func step(t testing.TB, s *Session, src string) string {
	t.Helper()
	out, err := s.Run(context.Background(), Request{Source: src})
	if err != nil {
		t.Fatalf("%q: %v", src, err)
	}
	return string(out.Value)
}

// carried are steps that each use what the steps before them defined: values,
// modules, classes, closures, an exception caught in an earlier run, and
// inputs and result, which are each run's own.
var carried = []struct{ src, want string }{
	{"import statistics\nx = 41\ndata = [1, 2, 3, 4]\nclass Box:\n    def __init__(self, v): self.v = v\n    def twice(self): return 2 * self.v\ndef counter():\n    n = 0\n    def bump():\n        nonlocal n\n        n += 1\n        return n\n    return bump\nbump = counter()\ntry:\n    {}['missing']\nexcept KeyError as e:\n    caught = e\nresult = 'defined'", `"defined"`},
	{"result = [x + 1, statistics.mean(data), Box(5).twice(), bump(), bump()]", `[42,2.5,10,1,2]`},
	{"result = [type(caught).__name__, str(caught), bump(), 'statistics' in __import__('sys').modules]", `["KeyError","'missing'",3,true]`},
	{"had = 'result' in globals()\nresult = [had, sorted(inputs)]", `[false,[]]`},
	{"x", `41`},
}

func TestSessionKeepsState(t *testing.T) {
	s := newSession(t, shared(t))
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	for _, c := range carried {
		if got := step(t, s, c.src); got != c.want {
			t.Fatalf("%q: got %s, want %s", c.src, got, c.want)
		}
	}
	out, err := s.Run(context.Background(), Request{Source: "result = [inputs, x]", Inputs: map[string]int{"n": 1}})
	if err != nil || string(out.Value) != `[{"n":1},41]` {
		t.Fatalf("inputs: %v %+v", err, out)
	}
	// A Python error ends the run, not the session: what the run did before it stays.
	if _, err := s.Run(context.Background(), Request{Source: "x = 7\nraise ValueError('no')"}); Classify(err) != OutcomePython {
		t.Fatalf("raise: %v", err)
	}
	if got := step(t, s, "x"); got != "7" {
		t.Fatalf("after the error x = %s", got)
	}
}

func TestSessionsAreIsolated(t *testing.T) {
	r := shared(t)
	a, b := newSession(t, r), newSession(t, r)
	step(t, a, "import statistics\nsecret = 'a'")
	step(t, b, "secret = 'b'")
	if got := step(t, a, "secret"); got != `"a"` {
		t.Fatalf("a sees %s", got)
	}
	if got := step(t, b, "result = [secret, 'statistics' in __import__('sys').modules]"); got != `["b",false]` {
		t.Fatalf("b sees %s", got)
	}
	// Pooled runs see nothing of either, before or after.
	for i := 0; i < 3; i++ {
		out := mustRun(t, r, "result = ['secret' in globals(), 'statistics' in __import__('sys').modules]", nil)
		if string(out.Value) != "[false,false]" {
			t.Fatalf("a pooled run sees %s", out.Value)
		}
	}
}

// TestSessionSnapshotRestore takes a snapshot after each step and checks that
// a session restored from it, in another Runner, gives the same next result
// as the original.
func TestSessionSnapshotRestore(t *testing.T) {
	ctx := context.Background()
	r := shared(t)
	other := newRunner(t, testManifest(), &Options{PoolSize: -1})
	s := newSession(t, r)
	for i, c := range carried[:len(carried)-1] {
		step(t, s, c.src)
		blob, err := s.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		restored, err := other.Restore(ctx, blob)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		next := carried[i+1]
		if got := step(t, restored, next.src); got != next.want {
			t.Fatalf("restored after step %d: %q gave %s, want %s", i, next.src, got, next.want)
		}
		restored.Close(ctx)
	}
}

// TestSessionRestoreInNewProcess restores a snapshot in another process (this
// test binary, run again) and compares its next result with the original's.
func TestSessionRestoreInNewProcess(t *testing.T) {
	if path := os.Getenv("SPINE_TEST_RESTORE"); path != "" {
		blob, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		s, err := shared(t).Restore(context.Background(), blob)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Printf("restored: %s\n", step(t, s, carried[2].src))
		return
	}
	if testing.Short() {
		t.Skip("starts another process")
	}
	s := newSession(t, shared(t))
	step(t, s, carried[0].src)
	step(t, s, carried[1].src)
	blob, err := s.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "session.snapshot")
	if err := os.WriteFile(path, blob, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestSessionRestoreInNewProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "SPINE_TEST_RESTORE="+path)
	got, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, got)
	}
	want := step(t, s, carried[2].src)
	if !strings.Contains(string(got), "restored: "+want+"\n") {
		t.Fatalf("the new process gave %s; this one %s", got, want)
	}
}

func TestSnapshotSmall(t *testing.T) {
	s := newSession(t, shared(t))
	step(t, s, carried[0].src)
	blob, err := s.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// The state is a few globals, a module and a class: a small difference
	// from the image, however large the Guest's memory.
	if len(blob) > 256<<10 {
		t.Fatalf("snapshot of small state is %d bytes", len(blob))
	}
	t.Logf("snapshot: %d bytes", len(blob))
}

func TestSnapshotMismatch(t *testing.T) {
	ctx := context.Background()
	s := newSession(t, shared(t))
	step(t, s, "x = 1")
	blob, err := s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m := testManifest()
	delete(m, "huge")
	fewer := newRunner(t, m, &Options{PoolSize: -1})
	if _, err := fewer.Restore(ctx, blob); !errors.Is(err, ErrSnapshotMismatch) || !strings.Contains(err.Error(), "tool list") {
		t.Fatalf("another tool list: %v", err)
	}
	// Another artifact: the same state under another artifact's identity.
	st, err := decodeSnapshot(shared(t).identity, blob, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	id := shared(t).identity
	id.artifact[0] ^= 1
	if _, err := shared(t).Restore(ctx, encodeSnapshot(id, st)); !errors.Is(err, ErrSnapshotMismatch) || !strings.Contains(err.Error(), "artifact") {
		t.Fatalf("another artifact: %v", err)
	}
	id = shared(t).identity
	id.image[0] ^= 1
	if _, err := shared(t).Restore(ctx, encodeSnapshot(id, st)); !errors.Is(err, ErrSnapshotMismatch) || !strings.Contains(err.Error(), "image") {
		t.Fatalf("another image: %v", err)
	}
}

// TestSnapshotDamage flips bits all over a snapshot and cuts it everywhere:
// every variant is refused with ErrSnapshot, and the Runner is fine after.
func TestSnapshotDamage(t *testing.T) {
	ctx := context.Background()
	r := shared(t)
	s := newSession(t, r)
	step(t, s, "x = 1")
	blob, err := s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stride := max(1, len(blob)/500)
	for i := 0; i < len(blob); i += stride {
		bad := append([]byte(nil), blob...)
		bad[i] ^= 0x40
		if _, err := r.Restore(ctx, bad); !errors.Is(err, ErrSnapshot) && !errors.Is(err, ErrSnapshotMismatch) {
			t.Fatalf("byte %d flipped: %v", i, err)
		}
		if _, err := r.Restore(ctx, blob[:i]); !errors.Is(err, ErrSnapshot) {
			t.Fatalf("cut at %d: %v", i, err)
		}
	}
	for _, junk := range [][]byte{nil, []byte("{}"), make([]byte, 1<<20)} {
		if _, err := r.Restore(ctx, junk); !errors.Is(err, ErrSnapshot) {
			t.Fatalf("junk: %v", err)
		}
	}
	if got := step(t, s, "x + 1"); got != "2" {
		t.Fatalf("after the damage: %s", got)
	}
}

// TestSnapshotHostileState restores well-formed snapshots whose pages are
// garbage: the Guest may fail, never the Host, and the failure is the
// session's alone.
func TestSnapshotHostileState(t *testing.T) {
	ctx := context.Background()
	r := shared(t)
	base := r.engine.Image()
	for _, tc := range []struct {
		name  string
		pages []uint32
	}{
		{"the first pages", []uint32{0, 1, 2, 3}},
		{"the middle", []uint32{uint32(len(base) / 2 / engine.StatePageSize)}},
		{"the last page", []uint32{uint32(len(base)/engine.StatePageSize - 1)}},
		{"every 16th page", func() (p []uint32) {
			for i := 0; i < len(base)/engine.StatePageSize; i += 16 {
				p = append(p, uint32(i))
			}
			return p
		}()},
	} {
		st := &engine.State{Memory: uint64(len(base)), Pages: tc.pages, Raw: make([]byte, (len(tc.pages)+7)/8)}
		for i := range tc.pages {
			page := make([]byte, engine.StatePageSize)
			for j := range page {
				page[j] = byte(j*7 + i)
			}
			st.Data = append(st.Data, page...)
		}
		s, err := r.Restore(ctx, encodeSnapshot(r.identity, st))
		if err != nil {
			t.Logf("%s: restore: %v", tc.name, err)
			continue
		}
		out, err := s.Run(ctx, Request{Source: "result = 1 + 1", Timeout: time.Minute})
		t.Logf("%s: %v %v", tc.name, err, out)
		s.Close(ctx)
	}
	if out := mustRun(t, r, "1 + 1", nil); string(out.Value) != "2" {
		t.Fatalf("a pooled run after: %s", out.Value)
	}
}

func FuzzDecodeSnapshot(f *testing.F) {
	id := newSnapshotIdentity([]byte("artifact"), []byte("tools"), strings.Repeat("ab", 32))
	good := encodeSnapshot(id, &engine.State{Memory: 1 << 20, Pages: []uint32{3, 9}, Raw: []byte{2}, Data: make([]byte, 2*engine.StatePageSize)})
	f.Add(good)
	f.Add(good[:snapshotHeaderSize])
	f.Add([]byte(snapshotMagic))
	f.Fuzz(func(t *testing.T, blob []byte) {
		// Each input also goes in with its checksum made right, so that the
		// fuzzer reaches the header's checks, the payload and the pages.
		if len(blob) >= snapshotHeaderSize {
			body := blob[:len(blob)-min(len(blob)-snapshotHeaderSize, snapshotTrailerSize)]
			fixed := binary.LittleEndian.AppendUint64(append([]byte(nil), body...), uint64(len(body)-snapshotHeaderSize))
			sum := sha256.Sum256(fixed)
			decodeChecked(t, id, append(fixed, sum[:]...))
		}
		decodeChecked(t, id, blob)
	})
}

func decodeChecked(t *testing.T, id snapshotIdentity, blob []byte) {
	{
		st, err := decodeSnapshot(id, blob, 64<<20)
		if err != nil {
			if !errors.Is(err, ErrSnapshot) && !errors.Is(err, ErrSnapshotMismatch) {
				t.Fatalf("error of no kind: %v", err)
			}
			return
		}
		if uint64(len(st.Data)) != uint64(len(st.Pages))*engine.StatePageSize || st.Memory > 64<<20 || len(st.Raw) != (len(st.Pages)+7)/8 {
			t.Fatalf("decoded an impossible state: %d pages, %d bytes, memory %d", len(st.Pages), len(st.Data), st.Memory)
		}
	}
}

// TestSessionRunsAreSerialised holds a session's run in a tool call and
// starts a second: it waits until the first ends, and a third whose ctx ends
// while it waits gives up with that error.
func TestSessionRunsAreSerialised(t *testing.T) {
	ctx := context.Background()
	g := newHoldTool()
	r := newRunner(t, g.manifest, &Options{PoolSize: -1})
	s := newSession(t, r)
	step(t, s, "log = []")
	first := make(chan error, 1)
	go func() {
		_, err := s.Run(ctx, Request{Source: "log.append('first in')\ngate()\nlog.append('first out')"})
		first <- err
	}()
	<-g.entered
	second := make(chan string, 1)
	go func() {
		out, err := s.Run(ctx, Request{Source: "log.append('second')\nresult = log"})
		if err != nil {
			second <- err.Error()
			return
		}
		second <- string(out.Value)
	}()
	waiting, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Run(waiting, Request{Source: "log.append('third')"}); !errors.Is(err, context.Canceled) {
		t.Fatalf("a run whose ctx ended while it waited: %v", err)
	}
	g.release <- struct{}{}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if got := <-second; got != `["first in","first out","second"]` {
		t.Fatalf("second saw %s", got)
	}
}

// TestSessionInterrupt: a session's run whose ctx ends (its time limit, a
// cancel) gets KeyboardInterrupt wherever it is, and the session keeps what
// the run left; a program that will not stop (its SIGINT handler does
// nothing) is stopped by force, and the session is lost. Each program waits
// at the gate, so that the stop comes after the lines before it ran, however
// slow the machine.
func TestSessionInterrupt(t *testing.T) {
	ctx := context.Background()
	g := newHoldTool()
	r := newRunner(t, g.manifest, &Options{PoolSize: -1})
	s := newSession(t, r)
	stop := func(src string) error {
		t.Helper()
		runCtx, cancel := context.WithCancel(ctx)
		defer cancel()
		done := make(chan error, 1)
		go func() {
			_, err := s.Run(runCtx, Request{Source: src})
			done <- err
		}()
		<-g.entered
		cancel()
		return <-done
	}
	step(t, s, "x = 1")
	// The interrupt comes in the gate's error or in the loop: either way
	// the program stops there, and x stays 2.
	if err := stop("x = 2\ntry:\n    gate()\nexcept RuntimeError:\n    pass\nwhile True: pass"); Classify(err) != OutcomeCanceled {
		t.Fatalf("loop: %v", err)
	}
	if err := s.Err(); err != nil {
		t.Fatalf("Err after the interrupted loop: %v", err)
	}
	if got := step(t, s, "x"); got != "2" {
		t.Fatalf("after the interrupted loop x = %s", got)
	}
	stubborn := "import signal\nsignal.signal(signal.SIGINT, lambda *args: None)\ntry:\n    gate()\nexcept RuntimeError:\n    pass\nwhile True: pass"
	if err := stop(stubborn); Classify(err) != OutcomeCanceled {
		t.Fatalf("stubborn loop: %v", err)
	}
	if err := s.Err(); !errors.Is(err, ErrSessionLost) {
		t.Fatalf("Err after the stubborn loop: %v", err)
	}
	if _, err := s.Run(ctx, Request{Source: "x"}); !errors.Is(err, ErrSessionLost) || Classify(err) != OutcomeSessionGone {
		t.Fatalf("after the stubborn loop: %v", err)
	}
	if _, err := s.Snapshot(ctx); !errors.Is(err, ErrSessionLost) {
		t.Fatalf("snapshot after the stubborn loop: %v", err)
	}
}

// TestSessionTimeout: the time limit stops a session's run as a cancel does
// (TestSessionInterrupt): wherever the interrupt lands — in the program's
// loop, or before the program began on a slow machine — the session runs on.
func TestSessionTimeout(t *testing.T) {
	ctx := context.Background()
	s := newSession(t, shared(t))
	step(t, s, "x = 1")
	if _, err := s.Run(ctx, Request{Source: "while True: pass", Timeout: 20 * time.Millisecond}); Classify(err) != OutcomeTimeout {
		t.Fatalf("loop: %v", err)
	}
	if err := s.Err(); err != nil {
		t.Fatalf("Err after the time-out: %v", err)
	}
	if got := step(t, s, "x"); got != "1" {
		t.Fatalf("x = %s", got)
	}
}

func TestSessionClose(t *testing.T) {
	ctx := context.Background()
	g := newHoldTool()
	r := newRunner(t, g.manifest, &Options{PoolSize: -1})
	s := newSession(t, r)
	running := make(chan error, 1)
	go func() {
		_, err := s.Run(ctx, Request{Source: "gate()"})
		running <- err
	}()
	<-g.entered
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-running; err == nil {
		t.Fatal("the run in flight went on after Close")
	}
	if _, err := s.Run(ctx, Request{Source: "1"}); !errors.Is(err, ErrSessionClosed) || !errors.Is(s.Err(), ErrSessionClosed) {
		t.Fatalf("after Close: %v (Err %v)", err, s.Err())
	}
	select {
	case <-s.Done():
	default:
		t.Fatal("Done is open after Close")
	}
	if err := s.Close(ctx); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if st := r.SessionStats(); st.Sessions != 0 || st.Live != 0 {
		t.Fatalf("after Close: %+v", st)
	}
	// Runner.Close ends the sessions left open.
	left := newSession(t, r)
	step(t, left, "1")
	r.Close(ctx)
	if _, err := left.Run(ctx, Request{Source: "1"}); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Runner.Close: %v", err)
	}
}

// TestSessionHibernation churns more sessions than may be live, in memory
// and in a folder: each keeps its own count through every hibernation.
func TestSessionHibernation(t *testing.T) {
	for _, dir := range []string{"", t.TempDir()} {
		t.Run(fmt.Sprintf("dir=%v", dir != ""), func(t *testing.T) {
			r := newRunner(t, testManifest(), &Options{PoolSize: -1, Sessions: SessionOptions{MaxLive: 2, Dir: dir}})
			const n = 5
			sessions := make([]*Session, n)
			for i := range sessions {
				sessions[i] = newSession(t, r)
				step(t, sessions[i], fmt.Sprintf("me = %d\ncount = 0", i))
			}
			var wg sync.WaitGroup
			errs := make(chan error, n)
			for i, s := range sessions {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for round := 1; round <= 4; round++ {
						out, err := s.Run(context.Background(), Request{Source: "count += 1\nresult = [me, count]"})
						if err != nil && errors.Is(err, ErrTooManySessions) {
							round-- // every live session was running: try again
							continue
						}
						if err != nil || string(out.Value) != fmt.Sprintf("[%d,%d]", i, round) {
							errs <- fmt.Errorf("session %d round %d: %v %v", i, round, err, out)
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			if st := r.SessionStats(); st.Live > 2 || st.Sessions != n {
				t.Fatalf("stats %+v", st)
			}
			if dir != "" {
				files, _ := filepath.Glob(filepath.Join(dir, "*.snapshot"))
				if len(files) != n-r.SessionStats().Live {
					t.Fatalf("%d snapshot files for %+v", len(files), r.SessionStats())
				}
				for _, s := range sessions {
					s.Close(context.Background())
				}
				if files, _ := filepath.Glob(filepath.Join(dir, "*")); len(files) != 0 {
					t.Fatalf("left behind: %v", files)
				}
			}
		})
	}
}

// TestSessionIdleAndTTL sweeps with a clock of its own: idle sessions
// hibernate, and expire after their time to live.
func TestSessionIdleAndTTL(t *testing.T) {
	// No sweeper: the test sweeps, with its own clock.
	r := newRunner(t, testManifest(), &Options{PoolSize: -1, Sessions: SessionOptions{Idle: -1}})
	r.opts.Sessions.Idle, r.opts.Sessions.TTL = time.Hour, 24*time.Hour
	var mu sync.Mutex
	now := time.Unix(1e9, 0)
	r.sessions.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) time.Time { mu.Lock(); defer mu.Unlock(); now = now.Add(d); return now }

	a, b := newSession(t, r), newSession(t, r)
	step(t, a, "x = 'a'")
	step(t, b, "x = 'b'")
	r.sweep(advance(30 * time.Minute))
	if st := r.SessionStats(); st.Live != 2 {
		t.Fatalf("after 30 minutes: %+v", st)
	}
	step(t, b, "x") // b is used: idle again from now
	r.sweep(advance(45 * time.Minute))
	if st := r.SessionStats(); st.Live != 1 || st.Sessions != 2 {
		t.Fatalf("a idle 75 minutes, b 45: %+v", st)
	}
	if got := step(t, a, "x"); got != `"a"` { // wakes
		t.Fatalf("a woke with %s", got)
	}
	r.sweep(advance(23*time.Hour + 30*time.Minute))
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

func TestSessionLimits(t *testing.T) {
	ctx := context.Background()
	r := newRunner(t, testManifest(), &Options{PoolSize: -1, Sessions: SessionOptions{Max: 2, MemoryLimit: 96 << 20}})
	a := newSession(t, r)
	newSession(t, r)
	if _, err := r.NewSession(ctx); !errors.Is(err, ErrTooManySessions) {
		t.Fatalf("a third session: %v", err)
	}
	// The session's memory limit: a run that needs more fails in Python, and
	// the session goes on.
	step(t, a, "keep = 'kept'")
	if _, err := a.Run(ctx, Request{Source: "big = bytearray(100 << 20)"}); Classify(err) != OutcomePython || !strings.Contains(err.Error(), "MemoryError") {
		t.Fatalf("over the session's memory: %v", err)
	}
	if got := step(t, a, "keep"); got != `"kept"` {
		t.Fatal(got)
	}
	// Files held open cannot be snapshotted; closed, they can.
	step(t, a, "f = open('/usr/local/lib/python311.zip', 'rb')")
	if _, err := a.Snapshot(ctx); !errors.Is(err, ErrSessionState) {
		t.Fatalf("snapshot with a file open: %v", err)
	}
	if got := step(t, a, "f.read(2).decode()"); got != `"PK"` {
		t.Fatalf("the file kept open read %s", got)
	}
	step(t, a, "f.close()")
	if _, err := a.Snapshot(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestSessionEarlyReads: early reads and prefix mode in a session give what
// they give with early reads off, and a tool an earlier run rebound is not
// read early.
func TestSessionEarlyReads(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	calls := map[string]int{}
	m := testManifest()
	m["lookup"] = ToolSpec{AllowEarlyRead: true, Call: func(ctx context.Context, args json.RawMessage) (any, error) {
		mu.Lock()
		calls[string(args)]++
		mu.Unlock()
		return lookupTool(ctx, args)
	}}
	r := newRunner(t, m, &Options{PoolSize: -1})
	programs := []string{
		"key = 'book'",
		"a = lookup(key=key)\nb = lookup(key='pen')\nresult = a + b",
		"real = lookup\nlookup = lambda **kw: 1000\nresult = lookup(key='book') + real(key='pen')",
		"result = lookup(key='book')",
	}
	var want []string
	off := newSession(t, r)
	for _, src := range programs {
		want = append(want, step(t, off, src))
	}
	for _, mode := range []string{"early", "prefix"} {
		s := newSession(t, r)
		mu.Lock()
		clear(calls)
		mu.Unlock()
		for i, src := range programs {
			req := Request{Source: src, EarlyReads: true}
			if mode == "prefix" {
				req = Request{Stream: strings.NewReader(src)}
			}
			out, err := s.Run(ctx, req)
			if err != nil || string(out.Value) != want[i] {
				t.Fatalf("%s, %q: %v %v, want %s", mode, src, err, out, want[i])
			}
		}
		mu.Lock()
		// book once (step 2) and pen twice (steps 2 and 3): never book for
		// the rebound name of steps 3 and 4, not even as an early read.
		if calls[`{"key":"book"}`] != 1 || calls[`{"key":"pen"}`] != 2 {
			t.Fatalf("%s: tool calls %v", mode, calls)
		}
		mu.Unlock()
	}
}

// TestSessionHibernatedFileDamaged: a hibernated session whose file is
// removed or changed behind the Runner's back is lost, clearly.
func TestSessionHibernatedFileDamaged(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	r := newRunner(t, testManifest(), &Options{PoolSize: -1, Sessions: SessionOptions{Dir: dir}})
	for _, damage := range []func(path string){
		func(path string) { os.Remove(path) },
		func(path string) { os.WriteFile(path, []byte("not a snapshot"), 0o600) },
	} {
		s := newSession(t, r)
		step(t, s, "x = 1")
		if err := s.Hibernate(ctx); err != nil {
			t.Fatal(err)
		}
		files, _ := filepath.Glob(filepath.Join(dir, "*.snapshot"))
		if len(files) != 1 {
			t.Fatalf("files: %v", files)
		}
		damage(files[0])
		if _, err := s.Run(ctx, Request{Source: "x"}); !errors.Is(err, ErrSessionLost) {
			t.Fatalf("waking: %v", err)
		}
		s.Close(ctx)
		if files, _ := filepath.Glob(filepath.Join(dir, "*")); len(files) != 0 {
			t.Fatalf("left behind: %v", files)
		}
	}
}

// TestSessionNoLeaks takes sessions through every path — new, run, a lost
// run, snapshot, restore, hibernate to a folder and wake, close, a Runner
// closed with sessions open — and checks that goroutines, descriptors and
// mappings come back.
func TestSessionNoLeaks(t *testing.T) {
	if testing.Short() {
		t.Skip("400 sessions; skipped with -short")
	}
	ctx := context.Background()
	before := countResources()
	r, err := New(ctx, testManifest(), &Options{PoolSize: 1, Sessions: SessionOptions{MaxLive: 4, Dir: t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	var open []*Session
	for i := 0; i < 400; i++ {
		s, err := r.NewSession(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Run(ctx, Request{Source: fmt.Sprintf("n = %d\nresult = lookup(key='book')", i)}); err != nil {
			t.Fatal(err)
		}
		switch i % 5 {
		case 0:
			s.Run(ctx, Request{Source: "while True: pass", Timeout: time.Millisecond})
		case 1:
			blob, err := s.Snapshot(ctx)
			if err != nil {
				t.Fatal(err)
			}
			restored, err := r.Restore(ctx, blob)
			if err != nil {
				t.Fatal(err)
			}
			if got := step(t, restored, "n"); got != fmt.Sprint(i) {
				t.Fatalf("restored n = %s", got)
			}
			restored.Close(ctx)
		case 2:
			if err := s.Hibernate(ctx); err != nil {
				t.Fatal(err)
			}
			step(t, s, "n")
		case 3:
			open = append(open, s) // left for Runner.Close
			continue
		}
		s.Close(ctx)
	}
	if st := r.SessionStats(); st.Sessions != len(open) || st.Live > 4 {
		t.Fatalf("stats %+v with %d open", st, len(open))
	}
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	before.check(t)
}

// TestSessionBudgets: the bytes hibernated sessions keep in memory are
// capped, and sessions holding files open cannot keep every live place.
func TestSessionBudgets(t *testing.T) {
	ctx := context.Background()
	r := newRunner(t, testManifest(), &Options{PoolSize: -1, Sessions: SessionOptions{MaxLive: 1, HibernatedMemory: 64 << 10}})
	a := newSession(t, r)
	step(t, a, "x = 'a'")
	// b makes room by hibernating a (a small snapshot fits the budget).
	b := newSession(t, r)
	step(t, b, "import os\nkeep = os.urandom(1 << 20)")
	// a wakes: b would hibernate to make room, but its snapshot is over the
	// budget, so a cannot wake.
	if _, err := a.Run(ctx, Request{Source: "x"}); !errors.Is(err, ErrTooManySessions) || !strings.Contains(err.Error(), "HibernatedMemory") {
		t.Fatalf("waking a past the budget: %v", err)
	}
	b.Close(ctx)
	if got := step(t, a, "x"); got != `"a"` {
		t.Fatal(got)
	}
	// A session holding a file open is lost, not kept, when room is needed.
	step(t, a, "f = open('/usr/local/lib/python311.zip', 'rb')")
	c := newSession(t, r)
	if got := step(t, c, "1"); got != "1" {
		t.Fatal(got)
	}
	if _, err := a.Run(ctx, Request{Source: "x"}); !errors.Is(err, ErrSessionLost) || !strings.Contains(err.Error(), "files open") {
		t.Fatalf("a after it held a live place with a file open: %v", err)
	}
	// Snapshot of a hibernated session is the caller's to change.
	if err := c.Hibernate(ctx); err != nil {
		t.Fatal(err)
	}
	blob, err := c.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	clear(blob)
	if got := step(t, c, "1 + 1"); got != "2" {
		t.Fatal(got)
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

// TestSessionCopyMode: sessions where images are copied rather than mapped
// copy-on-write (every platform but Linux): a pooled Guest with a lower
// session memory limit, and a snapshot taken by comparing every page.
func TestSessionCopyMode(t *testing.T) {
	ctx := context.Background()
	r, err := New(engine.WithStart(ctx, engine.StartCopy), testManifest(), &Options{PoolSize: 1, Sessions: SessionOptions{MemoryLimit: 96 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	s := newSession(t, r)
	for _, c := range carried[:2] {
		if got := step(t, s, c.src); got != c.want {
			t.Fatalf("%q: %s", c.src, got)
		}
	}
	if _, err := s.Run(ctx, Request{Source: "big = bytearray(100 << 20)"}); Classify(err) != OutcomePython {
		t.Fatalf("over the session's memory: %v", err)
	}
	blob, err := s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	restored, err := r.Restore(ctx, blob)
	if err != nil {
		t.Fatal(err)
	}
	defer restored.Close(ctx)
	if got := step(t, restored, carried[2].src); got != carried[2].want {
		t.Fatalf("restored: %s", got)
	}
}

// TestSessionRestoreOnOwnImage restores a snapshot in a Runner that captured
// its own image (as another machine does): captures of one key are the same
// bytes, so the snapshot's difference applies to either.
func TestSessionRestoreOnOwnImage(t *testing.T) {
	ctx := context.Background()
	a := newRunner(t, testManifest(), &Options{PoolSize: -1, CacheDir: t.TempDir()})
	b := newRunner(t, testManifest(), &Options{PoolSize: -1, CacheDir: t.TempDir()})
	s := newSession(t, a)
	for _, c := range carried[:len(carried)-1] {
		step(t, s, c.src)
	}
	blob, err := s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	restored, err := b.Restore(ctx, blob)
	if err != nil {
		t.Fatal(err)
	}
	defer restored.Close(ctx)
	last := carried[len(carried)-1]
	if got := step(t, restored, last.src); got != last.want {
		t.Fatalf("%q gave %s, want %s", last.src, got, last.want)
	}
}
