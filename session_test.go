package spine_test

import (
	"context"
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

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/internal/engine"
	"github.com/spine-run/spine/internal/spinetest"
)

// holdTool is a tool gate() that tells the test a run has reached it and
// holds the run there until the test lets it through (or its ctx ends).
type holdTool struct {
	entered, release chan struct{}
	manifest         spine.Manifest
}

func newHoldTool() *holdTool {
	h := &holdTool{entered: make(chan struct{}, 8), release: make(chan struct{})}
	h.manifest = spinetest.NewTools().Manifest()
	h.manifest["gate"] = spine.ToolSpec{Call: func(ctx context.Context, args json.RawMessage) (any, error) {
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
	s := spinetest.NewSession(t, shared(t))
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	for _, c := range carried {
		if got := spinetest.Step(t, s, c.src); got != c.want {
			t.Fatalf("%q: got %s, want %s", c.src, got, c.want)
		}
	}
	out, err := s.Run(context.Background(), spine.Request{Source: "result = [inputs, x]", Inputs: map[string]int{"n": 1}})
	if err != nil || string(out.Value) != `[{"n":1},41]` {
		t.Fatalf("inputs: %v %+v", err, out)
	}
	// A Python error ends the run, not the session: what the run did before it stays.
	if _, err := s.Run(context.Background(), spine.Request{Source: "x = 7\nraise ValueError('no')"}); spine.Classify(err) != spine.OutcomePython {
		t.Fatalf("raise: %v", err)
	}
	if got := spinetest.Step(t, s, "x"); got != "7" {
		t.Fatalf("after the error x = %s", got)
	}
}

func TestSessionsAreIsolated(t *testing.T) {
	r := shared(t)
	a, b := spinetest.NewSession(t, r), spinetest.NewSession(t, r)
	spinetest.Step(t, a, "import statistics\nsecret = 'a'")
	spinetest.Step(t, b, "secret = 'b'")
	if got := spinetest.Step(t, a, "secret"); got != `"a"` {
		t.Fatalf("a sees %s", got)
	}
	if got := spinetest.Step(t, b, "result = [secret, 'statistics' in __import__('sys').modules]"); got != `["b",false]` {
		t.Fatalf("b sees %s", got)
	}
	// Pooled runs see nothing of either, before or after.
	for i := 0; i < 3; i++ {
		out := spinetest.MustRun(t, r, spine.Request{Source: "result = ['secret' in globals(), 'statistics' in __import__('sys').modules]"})
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
	other := spinetest.NewRunner(t, suiteManifest(), &spine.Options{PoolSize: -1})
	s := spinetest.NewSession(t, r)
	for i, c := range carried[:len(carried)-1] {
		spinetest.Step(t, s, c.src)
		blob, err := s.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		restored, err := other.Restore(ctx, blob)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		next := carried[i+1]
		if got := spinetest.Step(t, restored, next.src); got != next.want {
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
		fmt.Printf("restored: %s\n", spinetest.Step(t, s, carried[2].src))
		return
	}
	if testing.Short() {
		t.Skip("starts another process")
	}
	s := spinetest.NewSession(t, shared(t))
	spinetest.Step(t, s, carried[0].src)
	spinetest.Step(t, s, carried[1].src)
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
	want := spinetest.Step(t, s, carried[2].src)
	if !strings.Contains(string(got), "restored: "+want+"\n") {
		t.Fatalf("the new process gave %s; this one %s", got, want)
	}
}

// TestSessionRunsAreSerialised holds a session's run in a tool call and
// starts a second: it waits until the first ends, and a third whose ctx ends
// while it waits gives up with that error.
func TestSessionRunsAreSerialised(t *testing.T) {
	ctx := context.Background()
	g := newHoldTool()
	r := spinetest.NewRunner(t, g.manifest, &spine.Options{PoolSize: -1})
	s := spinetest.NewSession(t, r)
	spinetest.Step(t, s, "log = []")
	first := make(chan error, 1)
	go func() {
		_, err := s.Run(ctx, spine.Request{Source: "log.append('first in')\ngate()\nlog.append('first out')"})
		first <- err
	}()
	<-g.entered
	second := make(chan string, 1)
	go func() {
		out, err := s.Run(ctx, spine.Request{Source: "log.append('second')\nresult = log"})
		if err != nil {
			second <- err.Error()
			return
		}
		second <- string(out.Value)
	}()
	waiting, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Run(waiting, spine.Request{Source: "log.append('third')"}); !errors.Is(err, context.Canceled) {
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
	r := spinetest.NewRunner(t, g.manifest, &spine.Options{PoolSize: -1})
	s := spinetest.NewSession(t, r)
	stop := func(src string) error {
		t.Helper()
		runCtx, cancel := context.WithCancel(ctx)
		defer cancel()
		done := make(chan error, 1)
		go func() {
			_, err := s.Run(runCtx, spine.Request{Source: src})
			done <- err
		}()
		<-g.entered
		cancel()
		return <-done
	}
	spinetest.Step(t, s, "x = 1")
	// The interrupt comes in the gate's error or in the loop: either way
	// the program stops there, and x stays 2.
	if err := stop("x = 2\ntry:\n    gate()\nexcept RuntimeError:\n    pass\nwhile True: pass"); spine.Classify(err) != spine.OutcomeCanceled {
		t.Fatalf("loop: %v", err)
	}
	if err := s.Err(); err != nil {
		t.Fatalf("Err after the interrupted loop: %v", err)
	}
	if got := spinetest.Step(t, s, "x"); got != "2" {
		t.Fatalf("after the interrupted loop x = %s", got)
	}
	stubborn := "import signal\nsignal.signal(signal.SIGINT, lambda *args: None)\ntry:\n    gate()\nexcept RuntimeError:\n    pass\nwhile True: pass"
	if err := stop(stubborn); spine.Classify(err) != spine.OutcomeCanceled {
		t.Fatalf("stubborn loop: %v", err)
	}
	if err := s.Err(); !errors.Is(err, spine.ErrSessionLost) {
		t.Fatalf("Err after the stubborn loop: %v", err)
	}
	if _, err := s.Run(ctx, spine.Request{Source: "x"}); !errors.Is(err, spine.ErrSessionLost) || spine.Classify(err) != spine.OutcomeSessionGone {
		t.Fatalf("after the stubborn loop: %v", err)
	}
	if _, err := s.Snapshot(ctx); !errors.Is(err, spine.ErrSessionLost) {
		t.Fatalf("snapshot after the stubborn loop: %v", err)
	}
}

// TestSessionTimeout: the time limit stops a session's run as a cancel does
// (TestSessionInterrupt): wherever the interrupt lands — in the program's
// loop, or before the program began on a slow machine — the session runs on.
func TestSessionTimeout(t *testing.T) {
	ctx := context.Background()
	s := spinetest.NewSession(t, shared(t))
	spinetest.Step(t, s, "x = 1")
	if _, err := s.Run(ctx, spine.Request{Source: "while True: pass", Timeout: 20 * time.Millisecond}); spine.Classify(err) != spine.OutcomeTimeout {
		t.Fatalf("loop: %v", err)
	}
	if err := s.Err(); err != nil {
		t.Fatalf("Err after the time-out: %v", err)
	}
	if got := spinetest.Step(t, s, "x"); got != "1" {
		t.Fatalf("x = %s", got)
	}
}

func TestSessionClose(t *testing.T) {
	ctx := context.Background()
	g := newHoldTool()
	r := spinetest.NewRunner(t, g.manifest, &spine.Options{PoolSize: -1})
	s := spinetest.NewSession(t, r)
	running := make(chan error, 1)
	go func() {
		_, err := s.Run(ctx, spine.Request{Source: "gate()"})
		running <- err
	}()
	<-g.entered
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-running; err == nil {
		t.Fatal("the run in flight went on after Close")
	}
	if _, err := s.Run(ctx, spine.Request{Source: "1"}); !errors.Is(err, spine.ErrSessionClosed) || !errors.Is(s.Err(), spine.ErrSessionClosed) {
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
	left := spinetest.NewSession(t, r)
	spinetest.Step(t, left, "1")
	r.Close(ctx)
	if _, err := left.Run(ctx, spine.Request{Source: "1"}); !errors.Is(err, spine.ErrClosed) {
		t.Fatalf("after Runner.Close: %v", err)
	}
}

// TestSessionHibernation churns more sessions than may be live, in memory
// and in a folder: each keeps its own count through every hibernation.
func TestSessionHibernation(t *testing.T) {
	for _, dir := range []string{"", t.TempDir()} {
		t.Run(fmt.Sprintf("dir=%v", dir != ""), func(t *testing.T) {
			r := spinetest.NewRunner(t, spinetest.NewTools().Manifest(), &spine.Options{PoolSize: -1, Sessions: spine.SessionOptions{MaxLive: 2, Dir: dir}})
			const n = 5
			sessions := make([]*spine.Session, n)
			for i := range sessions {
				sessions[i] = spinetest.NewSession(t, r)
				spinetest.Step(t, sessions[i], fmt.Sprintf("me = %d\ncount = 0", i))
			}
			var wg sync.WaitGroup
			errs := make(chan error, n)
			for i, s := range sessions {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for round := 1; round <= 4; round++ {
						out, err := s.Run(context.Background(), spine.Request{Source: "count += 1\nresult = [me, count]"})
						if err != nil && errors.Is(err, spine.ErrTooManySessions) {
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
				files := hibernatedFiles(t, dir)
				if len(files) != n-r.SessionStats().Live {
					t.Fatalf("%d snapshot files for %+v", len(files), r.SessionStats())
				}
				for _, s := range sessions {
					s.Close(context.Background())
				}
				if files := hibernatedFiles(t, dir); len(files) != 0 {
					t.Fatalf("left behind: %v", files)
				}
			}
		})
	}
}

func TestSessionLimits(t *testing.T) {
	ctx := context.Background()
	r := spinetest.NewRunner(t, spinetest.NewTools().Manifest(), &spine.Options{PoolSize: -1, Sessions: spine.SessionOptions{Max: 2, MemoryLimit: 96 << 20}})
	a := spinetest.NewSession(t, r)
	spinetest.NewSession(t, r)
	if _, err := r.NewSession(ctx); !errors.Is(err, spine.ErrTooManySessions) {
		t.Fatalf("a third session: %v", err)
	}
	// The session's memory limit: a run that needs more fails in Python, and
	// the session goes on.
	spinetest.Step(t, a, "keep = 'kept'")
	if _, err := a.Run(ctx, spine.Request{Source: "big = bytearray(100 << 20)"}); spine.Classify(err) != spine.OutcomePython || !strings.Contains(err.Error(), "MemoryError") {
		t.Fatalf("over the session's memory: %v", err)
	}
	if got := spinetest.Step(t, a, "keep"); got != `"kept"` {
		t.Fatal(got)
	}
	// Files held open cannot be snapshotted; closed, they can.
	spinetest.Step(t, a, "f = open('/usr/local/lib/python311.zip', 'rb')")
	if _, err := a.Snapshot(ctx); !errors.Is(err, spine.ErrSessionState) {
		t.Fatalf("snapshot with a file open: %v", err)
	}
	if got := spinetest.Step(t, a, "f.read(2).decode()"); got != `"PK"` {
		t.Fatalf("the file kept open read %s", got)
	}
	spinetest.Step(t, a, "f.close()")
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
	m := spinetest.NewTools().Manifest()
	lookup := m["lookup"].Call
	m["lookup"] = spine.ToolSpec{AllowEarlyRead: true, Call: func(ctx context.Context, args json.RawMessage) (any, error) {
		mu.Lock()
		calls[string(args)]++
		mu.Unlock()
		return lookup(ctx, args)
	}}
	r := spinetest.NewRunner(t, m, &spine.Options{PoolSize: -1})
	programs := []string{
		"key = 'book'",
		"a = lookup(key=key)\nb = lookup(key='pen')\nresult = a + b",
		"real = lookup\nlookup = lambda **kw: 1000\nresult = lookup(key='book') + real(key='pen')",
		"result = lookup(key='book')",
	}
	var want []string
	off := spinetest.NewSession(t, r)
	for _, src := range programs {
		want = append(want, spinetest.Step(t, off, src))
	}
	for _, mode := range []string{"early", "prefix"} {
		s := spinetest.NewSession(t, r)
		mu.Lock()
		clear(calls)
		mu.Unlock()
		for i, src := range programs {
			req := spine.Request{Source: src, EarlyReads: true}
			if mode == "prefix" {
				req = spine.Request{Stream: strings.NewReader(src)}
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
	r := spinetest.NewRunner(t, spinetest.NewTools().Manifest(), &spine.Options{PoolSize: -1, Sessions: spine.SessionOptions{Dir: dir}})
	for _, damage := range []func(path string){
		func(path string) { os.Remove(path) },
		func(path string) { os.WriteFile(path, []byte("not a snapshot"), 0o600) },
	} {
		s := spinetest.NewSession(t, r)
		spinetest.Step(t, s, "x = 1")
		if err := s.Hibernate(ctx); err != nil {
			t.Fatal(err)
		}
		files := hibernatedFiles(t, dir)
		if len(files) != 1 {
			t.Fatalf("files: %v", files)
		}
		damage(files[0])
		if _, err := s.Run(ctx, spine.Request{Source: "x"}); !errors.Is(err, spine.ErrSessionLost) {
			t.Fatalf("waking: %v", err)
		}
		s.Close(ctx)
		if files := hibernatedFiles(t, dir); len(files) != 0 {
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
	r, err := spine.New(ctx, spinetest.NewTools().Manifest(), &spine.Options{PoolSize: 1, Sessions: spine.SessionOptions{MaxLive: 4, Dir: t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	var open []*spine.Session
	for i := 0; i < 400; i++ {
		s, err := r.NewSession(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Run(ctx, spine.Request{Source: fmt.Sprintf("n = %d\nresult = lookup(key='book')", i)}); err != nil {
			t.Fatal(err)
		}
		switch i % 5 {
		case 0:
			s.Run(ctx, spine.Request{Source: "while True: pass", Timeout: time.Millisecond})
		case 1:
			blob, err := s.Snapshot(ctx)
			if err != nil {
				t.Fatal(err)
			}
			restored, err := r.Restore(ctx, blob)
			if err != nil {
				t.Fatal(err)
			}
			if got := spinetest.Step(t, restored, "n"); got != fmt.Sprint(i) {
				t.Fatalf("restored n = %s", got)
			}
			restored.Close(ctx)
		case 2:
			if err := s.Hibernate(ctx); err != nil {
				t.Fatal(err)
			}
			spinetest.Step(t, s, "n")
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
	r := spinetest.NewRunner(t, spinetest.NewTools().Manifest(), &spine.Options{PoolSize: -1, Sessions: spine.SessionOptions{MaxLive: 1, HibernatedMemory: 64 << 10}})
	a := spinetest.NewSession(t, r)
	spinetest.Step(t, a, "x = 'a'")
	// b makes room by hibernating a (a small snapshot fits the budget).
	b := spinetest.NewSession(t, r)
	spinetest.Step(t, b, "import os\nkeep = os.urandom(1 << 20)")
	// a wakes: b would hibernate to make room, but its snapshot is over the
	// budget, so a cannot wake.
	if _, err := a.Run(ctx, spine.Request{Source: "x"}); !errors.Is(err, spine.ErrTooManySessions) || !strings.Contains(err.Error(), "HibernatedMemory") {
		t.Fatalf("waking a past the budget: %v", err)
	}
	b.Close(ctx)
	if got := spinetest.Step(t, a, "x"); got != `"a"` {
		t.Fatal(got)
	}
	// A session holding a file open is lost, not kept, when room is needed.
	spinetest.Step(t, a, "f = open('/usr/local/lib/python311.zip', 'rb')")
	c := spinetest.NewSession(t, r)
	if got := spinetest.Step(t, c, "1"); got != "1" {
		t.Fatal(got)
	}
	if _, err := a.Run(ctx, spine.Request{Source: "x"}); !errors.Is(err, spine.ErrSessionLost) || !strings.Contains(err.Error(), "files open") {
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
	if got := spinetest.Step(t, c, "1 + 1"); got != "2" {
		t.Fatal(got)
	}
}

// TestSessionCopyMode: sessions where images are copied rather than mapped
// copy-on-write (every platform but Linux): a pooled Guest with a lower
// session memory limit, and a snapshot taken by comparing every page.
func TestSessionCopyMode(t *testing.T) {
	ctx := context.Background()
	r, err := spine.New(engine.WithStart(ctx, engine.StartCopy), spinetest.NewTools().Manifest(), &spine.Options{PoolSize: 1, Sessions: spine.SessionOptions{MemoryLimit: 96 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	s := spinetest.NewSession(t, r)
	for _, c := range carried[:2] {
		if got := spinetest.Step(t, s, c.src); got != c.want {
			t.Fatalf("%q: %s", c.src, got)
		}
	}
	if _, err := s.Run(ctx, spine.Request{Source: "big = bytearray(100 << 20)"}); spine.Classify(err) != spine.OutcomePython {
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
	if got := spinetest.Step(t, restored, carried[2].src); got != carried[2].want {
		t.Fatalf("restored: %s", got)
	}
}

// TestSessionRestoreOnOwnImage restores a snapshot in a Runner that captured
// its own image (as another machine does): captures of one key are the same
// bytes, so the snapshot's difference applies to either.
func TestSessionRestoreOnOwnImage(t *testing.T) {
	ctx := context.Background()
	a := spinetest.NewRunner(t, spinetest.NewTools().Manifest(), &spine.Options{PoolSize: -1, CacheDir: t.TempDir()})
	b := spinetest.NewRunner(t, spinetest.NewTools().Manifest(), &spine.Options{PoolSize: -1, CacheDir: t.TempDir()})
	s := spinetest.NewSession(t, a)
	for _, c := range carried[:len(carried)-1] {
		spinetest.Step(t, s, c.src)
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
	if got := spinetest.Step(t, restored, last.src); got != last.want {
		t.Fatalf("%q gave %s, want %s", last.src, got, last.want)
	}
}

func TestSnapshotSmall(t *testing.T) {
	s := spinetest.NewSession(t, shared(t))
	spinetest.Step(t, s, carried[0].src)
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
