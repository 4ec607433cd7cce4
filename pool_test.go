package spine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spine-run/spine/internal/engine"
)

// poolRunner has one pooled instance, so consecutive runs reuse the same Guest.
func poolRunner(t testing.TB) *Runner {
	t.Helper()
	if !engine.COWSupported {
		t.Skip("instances are reused only with copy-on-write images")
	}
	return newRunner(t, testManifest(), &Options{PoolSize: 1})
}

func TestPoolReusesInstances(t *testing.T) {
	r := poolRunner(t)
	for i := 0; i < 5; i++ {
		// A run that finds the Guest still being reset makes a new one
		// rather than wait: wait here, so that reuse is what is measured.
		for r.Stats().PoolReady < 1 {
			runtime.Gosched()
		}
		mustRun(t, r, "1", nil)
	}
	// One instance for the image, one for the pool; every run reused the pooled one.
	if made := r.Stats().InstancesMade; made > 2 {
		t.Fatalf("%d instances made for 5 runs: the pool does not reuse them", made)
	}
}

func TestPoolIsolation(t *testing.T) {
	r := poolRunner(t)
	probe := `import builtins, json, sys, os, random
result = {
    "globals": "secret" in globals(),
    "builtins": hasattr(builtins, "leaked"),
    "module": hasattr(json, "leaked"),
    "modules": "planted" in sys.modules,
    "recursion": sys.getrecursionlimit(),
    "stdout": sys.stdout.__class__.__name__,
}`
	clean := mustRun(t, r, probe, nil)
	for i := 0; i < 3; i++ {
		mustRun(t, r, dirtyProgram, nil)
		after := mustRun(t, r, probe, nil)
		if string(after.Value) != string(clean.Value) {
			t.Fatalf("state leaked through the pool:\nclean %s\nafter %s", clean.Value, after.Value)
		}
	}
	if made, runs := r.Stats().InstancesMade, r.Stats().Runs; made > runs/2+2 {
		t.Fatalf("%d instances made for %d runs: the test did not exercise reuse", made, runs)
	}
}

// dirtyProgram changes everything a later run could see if the reset missed it.
const dirtyProgram = `import builtins, json, sys
secret = "TOP-SECRET-" + str(12345 * 2)
kept = [secret] * 1000
builtins.leaked = secret
json.leaked = secret
sys.modules["planted"] = json
sys.setrecursionlimit(50)
class Noisy:
    def write(self, s): pass
sys.stdout = Noisy()
`

// TestResetRestoresTheImage: after reset, an instance's memory holds nothing
// of the run before, byte for byte where that run wrote.
func TestResetRestoresTheImage(t *testing.T) {
	r := poolRunner(t)
	ctx := context.Background()
	inst, err := r.engine.NewInstance(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close()
	request, err := r.encodeExecute(Request{}, dirtyProgram, json.RawMessage("{}"), false, false)
	if err != nil {
		t.Fatal(err)
	}
	st := newRunState(r, ctx, false)
	defer st.close()
	if _, err := inst.Execute(inst.Begin(st.ctx, nil), request, 1<<20); err != nil {
		t.Fatal(err)
	}
	mem := inst.Memory()
	data, _ := mem.Read(0, mem.Size())
	if !bytes.Contains(data, []byte("TOP-SECRET-24690")) {
		t.Fatal("the secret is not in memory after the run: the test proves nothing")
	}
	if err := inst.Reset(); err != nil {
		t.Fatal(err)
	}
	data, _ = mem.Read(0, mem.Size())
	if bytes.Contains(data, []byte("TOP-SECRET-24690")) {
		t.Fatal("a string of the previous run is still in memory after reset")
	}
	if img := r.engine.Image(); !bytes.Equal(data[:len(img)], img) {
		t.Fatal("memory after reset differs from the image")
	}
}

func TestPoolRandomState(t *testing.T) {
	r := poolRunner(t)
	src := `import random, os
result = [random.random(), os.urandom(8).hex()]`
	a := mustRun(t, r, src, nil)
	b := mustRun(t, r, src, nil)
	if string(a.Value) == string(b.Value) {
		t.Fatalf("two runs drew the same random numbers: %s", a.Value)
	}
}

func TestPoolOpenFilesAreNotInherited(t *testing.T) {
	r := poolRunner(t)
	mustRun(t, r, `f = open("/usr/local/lib/python311.zip", "rb")
result = f.fileno()`, nil)
	out := mustRun(t, r, `import os
try:
    os.fstat(5)
    result = "fd 5 is open"
except OSError:
    result = "closed"`, nil)
	if string(out.Value) != `"closed"` {
		t.Fatalf("a file left open by the previous run is visible: %s", out.Value)
	}
}

func TestPoolRecovers(t *testing.T) {
	r := poolRunner(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		src  string
		ok   func(error) bool
	}{
		{"timeout", "while True: pass", func(err error) bool { return errors.Is(err, context.DeadlineExceeded) }},
		{"exit", "import os\nos._exit(3)", func(err error) bool { var pe *PythonError; return errors.As(err, &pe) && pe.Type == "SystemExit" }},
		{"stack overflow", "import sys, json\nsys.setrecursionlimit(10**7)\nx = []\nfor _ in range(5 * 10**5):\n    x = [x]\njson.dumps(x)", func(err error) bool { var pe *PythonError; return errors.As(err, &pe) && pe.Type == "RecursionError" }},
		{"memory growth", "x = bytearray(64 << 20)\nresult = len(x)", func(err error) bool { return err == nil }},
		{"python error", "1/0", func(err error) bool { var pe *PythonError; return errors.As(err, &pe) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Only the time-out case has a deadline: the others must fail
			// (or succeed) for their own reason, however busy the machine.
			rctx, cancel := context.WithCancel(ctx)
			if tc.name == "timeout" {
				rctx, cancel = context.WithTimeout(ctx, 300*time.Millisecond)
			}
			defer cancel()
			_, err := r.Run(rctx, Request{Source: tc.src})
			if !tc.ok(err) {
				t.Fatalf("err = %v", err)
			}
			for i := 0; i < 3; i++ {
				out := mustRun(t, r, `lookup(key="book") * 2`, nil)
				if string(out.Value) != "42" {
					t.Fatalf("after %s: value %s", tc.name, out.Value)
				}
			}
		})
	}
}

func TestPoolHammer(t *testing.T) {
	r := newRunner(t, testManifest(), &Options{PoolSize: 2})
	programs := []struct {
		src  string
		want string
	}{
		{`lookup(key="book") * inputs["n"]`, "n21"},
		{`print("x" * inputs["n"])` + "\n" + `result = inputs["n"]`, "n"},
		{"1/0", "ZeroDivisionError"},
		{"while True: pass", "deadline"},
		{`import json; json.dumps({"n": inputs["n"]})`, "json"},
	}
	var wg sync.WaitGroup
	errs := make(chan error, 1000)
	for g := 0; g < 6; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 40; i++ {
				p := programs[(g+i)%len(programs)]
				n := g*100 + i
				ctx, cancel := context.WithCancel(context.Background())
				if p.want == "deadline" {
					ctx, cancel = context.WithTimeout(context.Background(), 20*time.Millisecond)
				}
				out, err := r.Run(ctx, Request{Source: p.src, Inputs: map[string]int{"n": n}})
				cancel()
				switch p.want {
				case "n21":
					if err != nil || string(out.Value) != fmt.Sprint(21*n) {
						errs <- fmt.Errorf("%q n=%d: %v %v", p.src, n, out, err)
					}
				case "n":
					if err != nil || string(out.Value) != fmt.Sprint(n) || out.Stdout != strings.Repeat("x", n)+"\n" {
						errs <- fmt.Errorf("%q n=%d: %v", p.src, n, err)
					}
				case "json":
					if err != nil || string(out.Value) != fmt.Sprintf(`"{\"n\": %d}"`, n) {
						errs <- fmt.Errorf("%q n=%d: %v %v", p.src, n, out, err)
					}
				case "ZeroDivisionError":
					var pe *PythonError
					if !errors.As(err, &pe) || pe.Type != "ZeroDivisionError" {
						errs <- fmt.Errorf("%q: %v", p.src, err)
					}
				case "deadline":
					if !errors.Is(err, context.DeadlineExceeded) {
						errs <- fmt.Errorf("%q: %v", p.src, err)
					}
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestNoLeaks runs 10,000 programs and checks that goroutines, file
// descriptors and memory mappings come back to where they were.
func TestNoLeaks(t *testing.T) {
	if testing.Short() {
		t.Skip("10,000 runs; skipped with -short")
	}
	before := countResources()
	r, err := New(context.Background(), testManifest(), &Options{PoolSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	programs := []string{`lookup(key="book")`, "1/0", `print("hello")`}
	start := time.Now()
	for i := 0; i < 10000; i++ {
		ctx, cancel := context.WithCancel(context.Background())
		src := programs[i%len(programs)]
		switch {
		case i%500 == 0: // a time-out: the instance is replaced
			src = "while True: pass"
			cancel()
			ctx, cancel = context.WithTimeout(context.Background(), 5*time.Millisecond)
		case i%100 == 1: // a file left open: the instance is replaced
			src = `open("/usr/local/lib/python311.zip", "rb")`
		case i%100 == 2: // memory growth: the instance is replaced
			src = "x = bytearray(40 << 20)"
		}
		r.Run(ctx, Request{Source: src})
		cancel()
	}
	t.Logf("10,000 runs in %v", time.Since(start))
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	before.check(t)
}

// resources is what the process holds: goroutines, descriptors, memory
// mappings and OS threads.
type resources struct{ goroutines, fds, maps, threads int }

func countResources() resources {
	runtime.GC()
	entries, _ := os.ReadDir("/proc/self/fd")
	data, _ := os.ReadFile("/proc/self/maps")
	status, _ := os.ReadFile("/proc/self/status")
	var threads int
	if _, rest, ok := strings.Cut(string(status), "Threads:"); ok {
		threads, _ = strconv.Atoi(strings.TrimSpace(strings.SplitN(rest, "\n", 2)[0]))
	}
	return resources{runtime.NumGoroutine(), len(entries), bytes.Count(data, []byte("\n")), threads}
}

// leakedSince reports whether now holds more than before. Go never ends an
// OS thread it started, and each keeps a stack, a guard page and a malloc
// arena, so mappings may grow by 4 a new thread.
func (before resources) leakedSince(now resources) bool {
	return now.goroutines > before.goroutines || now.fds > before.fds ||
		now.maps > before.maps+8+4*max(now.threads-before.threads, 0)
}

// check fails t if the process holds more than before. Goroutines that are
// ending may not be gone yet: it gives them a few collections first.
func (before resources) check(t *testing.T) {
	t.Helper()
	now := countResources()
	for i := 0; i < 100 && before.leakedSince(now); i++ {
		runtime.Gosched()
		time.Sleep(10 * time.Millisecond)
		now = countResources()
	}
	t.Logf("%+v -> %+v", before, now)
	if before.leakedSince(now) {
		t.Fatalf("leak: %+v -> %+v", before, now)
	}
}
