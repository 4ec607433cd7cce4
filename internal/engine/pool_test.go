package engine

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tetratelabs/wazero/sys"
)

// These tests run the embedded Guest from the pool: a Guest goes back to it
// after a clean run, reset to the image, and nothing of one run reaches the
// next.

// poolEngine has one pooled Guest, so consecutive runs reuse the same one.
func poolEngine(t testing.TB) *Engine {
	t.Helper()
	if !COWSupported {
		t.Skip("Guests are reused only with copy-on-write images")
	}
	return testEngine(t, Config{PoolSize: 1})
}

// waitReady waits until the pool has a Guest ready: the refiller makes the
// pool's Guests in the background, and a run that finds none makes its own.
func waitReady(e *Engine) {
	for e.Stats().PoolReady < 1 {
		runtime.Gosched()
	}
}

func TestPoolReusesInstances(t *testing.T) {
	e := poolEngine(t)
	for i := 0; i < 5; i++ {
		waitReady(e)
		testRun(t, e, "result = 1", nil, `{"value":1}`)
	}
	// One instance for the image, one for the pool; every run reused the pooled one.
	if made := e.Stats().InstancesMade; made > 2 {
		t.Fatalf("%d instances made for 5 runs: the pool does not reuse them", made)
	}
}

// TestPoolHandsOutTheGuestResetLast: Release resets a Guest before it
// returns, and the next Acquire gets that Guest back, not another one
// waiting in the pool (whose pages are no longer in the core's caches).
func TestPoolHandsOutTheGuestResetLast(t *testing.T) {
	if !COWSupported {
		t.Skip("Guests are reused only with copy-on-write images")
	}
	e := testEngine(t, Config{PoolSize: 2})
	for e.Stats().PoolReady < 2 {
		runtime.Gosched()
	}
	ctx := context.Background()
	made := e.Stats().InstancesMade
	for i := 0; i < 3; i++ {
		inst, err := e.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := inst.Execute(inst.Begin(ctx, nil), testRequest("result = 1", nil), 1<<20); err != nil {
			t.Fatal(err)
		}
		inst.End()
		e.Release(inst, true)
		if ready := e.Stats().PoolReady; ready != 2 {
			t.Fatalf("run %d: %d Guests ready just after Release, want 2: the reset is not done", i, ready)
		}
		next, err := e.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		e.Release(next, true)
		if next != inst {
			t.Fatalf("run %d: Acquire handed out another Guest than the one just reset", i)
		}
	}
	if now := e.Stats().InstancesMade; now != made {
		t.Fatalf("%d instances made for the runs, want none: the pool's two serve them", now-made)
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

func TestPoolIsolation(t *testing.T) {
	e := poolEngine(t)
	probe := `import builtins, json, sys, os, random
result = {
    "globals": "secret" in globals(),
    "builtins": hasattr(builtins, "leaked"),
    "module": hasattr(json, "leaked"),
    "modules": "planted" in sys.modules,
    "recursion": sys.getrecursionlimit(),
    "stdout": sys.stdout.__class__.__name__,
}`
	ctx := context.Background()
	clean, err := testExecute(ctx, e, probe, nil)
	if err != nil || !strings.Contains(clean, `"recursion"`) {
		t.Fatalf("probe: %s, %v", clean, err)
	}
	runs := 1
	for i := 0; i < 3; i++ {
		waitReady(e)
		testRun(t, e, dirtyProgram, nil, `{"value":null}`)
		waitReady(e)
		after, err := testExecute(ctx, e, probe, nil)
		if err != nil || after != clean {
			t.Fatalf("state leaked through the pool:\nclean %s\nafter %s (%v)", clean, after, err)
		}
		runs += 2
	}
	if made := int(e.Stats().InstancesMade); made > runs/2+2 {
		t.Fatalf("%d instances made for %d runs: the test did not exercise reuse", made, runs)
	}
}

// TestResetRestoresTheImage: after reset, an instance's memory holds nothing
// of the run before, byte for byte where that run wrote.
func TestResetRestoresTheImage(t *testing.T) {
	e := poolEngine(t)
	ctx := context.Background()
	inst, err := e.NewInstance(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close()
	if _, err := inst.Execute(inst.Begin(ctx, nil), testRequest(dirtyProgram, nil), 1<<20); err != nil {
		t.Fatal(err)
	}
	inst.End()
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
	if img := e.image.memfd.view; !bytes.Equal(data[:len(img)], img) {
		t.Fatal("memory after reset differs from the image")
	}
}

func TestPoolRandomState(t *testing.T) {
	e := poolEngine(t)
	src := `import random, os
result = [random.random(), os.urandom(8).hex()]`
	ctx := context.Background()
	a, errA := testExecute(ctx, e, src, nil)
	waitReady(e)
	b, errB := testExecute(ctx, e, src, nil)
	if errA != nil || errB != nil || a == b {
		t.Fatalf("two runs drew the same random numbers: %s, %s (%v, %v)", a, b, errA, errB)
	}
}

func TestPoolOpenFilesAreNotInherited(t *testing.T) {
	e := poolEngine(t)
	testRun(t, e, `f = open("/usr/local/lib/python311.zip", "rb")
result = f.fileno()`, nil, `{"value":5}`)
	waitReady(e)
	testRun(t, e, `import os
try:
    os.fstat(5)
    result = "fd 5 is open"
except OSError:
    result = "closed"`, nil, `{"value":"closed"}`)
}

// TestPoolRecovers: after a run that stopped the Guest (a time-out, an exit,
// a trap) or grew its memory, or one that raised, the next runs from the pool
// work.
func TestPoolRecovers(t *testing.T) {
	e := poolEngine(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		src  string
		ok   func(response string, err error) bool
	}{
		{"timeout", "while True: pass", func(_ string, err error) bool { return err != nil }},
		{"exit", "import os\nos._exit(3)", func(_ string, err error) bool {
			var exit *sys.ExitError
			return errors.As(err, &exit) && exit.ExitCode() == 3
		}},
		{"stack overflow", "import sys, json\nsys.setrecursionlimit(10**7)\nx = []\nfor _ in range(5 * 10**5):\n    x = [x]\njson.dumps(x)",
			func(_ string, err error) bool { return err != nil && strings.Contains(err.Error(), "stack overflow") }},
		{"memory growth", "x = bytearray(64 << 20)\nresult = len(x)", func(r string, err error) bool { return err == nil && r == `{"value":67108864}` }},
		{"python error", "1/0", func(r string, err error) bool { return err == nil && strings.Contains(r, `"ZeroDivisionError"`) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Only the time-out case has a deadline: the others must fail
			// (or succeed) for their own reason, however busy the machine.
			rctx, cancel := context.WithCancel(ctx)
			if tc.name == "timeout" {
				rctx, cancel = context.WithTimeout(ctx, 300*time.Millisecond)
			}
			defer cancel()
			response, err := testExecute(rctx, e, tc.src, nil)
			if !tc.ok(withoutDisplay(response), err) {
				t.Fatalf("%s, %v", response, err)
			}
			for i := 0; i < 3; i++ {
				testRun(t, e, "result = 21 * 2", nil, `{"value":42}`)
			}
		})
	}
}
