package tests

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/internal/spinetest"
)

// The tests in this file cover early reads on the Guest's side: the PLM pass
// (guest/python/plm/) and the Guest's futures, in the real Guest.

// TestPLMGuestUnitTests runs every guest/tests/test_*.py as a program in the
// real Guest. Each file talks to a fake _spine (guest/tests/harness.py, passed
// in inputs) and sets result to {"passed": [...], "failed": [...]}.
func TestPLMGuestUnitTests(t *testing.T) {
	harness, err := os.ReadFile(filepath.Join("..", "guest", "tests", "harness.py"))
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join("..", "guest", "tests", "test_*.py"))
	if len(files) == 0 {
		t.Fatal("no guest/tests/test_*.py")
	}
	r := spinetest.NewRunner(t, spine.Manifest{"lookup": spinetest.NewTools().Manifest()["lookup"]}, &spine.Options{MaxOutput: 4 << 20})
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			src, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			out, err := r.Run(context.Background(), spine.Request{
				Source:   string(src),
				Filename: filepath.Base(file),
				Inputs:   map[string]any{"harness": string(harness)},
			})
			if err != nil {
				var pe *spine.PythonError
				if errors.As(err, &pe) {
					t.Fatalf("%v\n%s", err, pe.Traceback)
				}
				t.Fatal(err)
			}
			var summary struct {
				Passed []string
				Failed []struct{ Test, Error string }
			}
			if err := json.Unmarshal(out.Value, &summary); err != nil {
				t.Fatalf("result %s: %v", out.Value, err)
			}
			for _, f := range summary.Failed {
				t.Errorf("%s failed in the Guest:\n%s", f.Test, f.Error)
			}
			if len(summary.Passed) == 0 {
				t.Fatalf("no test passed: %s", out.Value)
			}
			t.Logf("%d passed in the Guest", len(summary.Passed))
		})
	}
}

// TestPLMGuestUnitTestsNative runs the same files with the build Python
// (CPython 3.11.2, like the Guest), when this machine has it.
func TestPLMGuestUnitTestsNative(t *testing.T) {
	python := "/usr/bin/python3.11"
	version, err := exec.Command(python, "-c", "import sys; print(sys.version.split()[0])").Output()
	if err != nil || strings.TrimSpace(string(version)) != "3.11.2" {
		t.Skipf("%s 3.11.2 not available", python)
	}
	files, _ := filepath.Glob(filepath.Join("..", "guest", "tests", "test_*.py"))
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			cmd := exec.Command(python, "-B", "-E", "-s", file)
			output, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%v\n%s", err, output)
			}
		})
	}
}

// gate is an early-read tool that shows which calls were in flight together.
// A call {"k": K, "wait": [...]} starts, then waits (up to 5 s) until every
// key in wait has started: with early reads the program's later reads start
// before it claims this one, so nothing waits; without them it would time out.
type gate struct {
	mu      sync.Mutex
	changed chan struct{}
	events  []string // "start:K", "end:K", and marks, in order
	started map[string]int
	running int
	peak    int // most calls in flight at once
}

func newGate() *gate {
	return &gate{changed: make(chan struct{}), started: make(map[string]int)}
}

func (g *gate) note(event string, delta int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.events = append(g.events, event)
	if k, ok := strings.CutPrefix(event, "start:"); ok {
		g.started[k]++
	}
	g.running += delta
	g.peak = max(g.peak, g.running)
	close(g.changed)
	g.changed = make(chan struct{})
}

func (g *gate) call(ctx context.Context, args json.RawMessage) (any, error) {
	var a struct {
		K    any      `json:"k"`
		Wait []string `json:"wait"`
	}
	if err := json.Unmarshal(args, &a); err != nil {
		return nil, err
	}
	k := fmt.Sprint(a.K)
	g.note("start:"+k, +1)
	defer g.note("end:"+k, -1)
	if k == "err" {
		return nil, errors.New("gate: bad key")
	}
	// A key that never starts keeps the call waiting until the run ends:
	// the run's own time limit, not a clock of the test's.
	for {
		g.mu.Lock()
		ready := true
		for _, w := range a.Wait {
			ready = ready && g.started[w] > 0
		}
		changed := g.changed
		g.mu.Unlock()
		if ready {
			return "v:" + k, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, fmt.Errorf("gate: %v never started while %s waited: %w", a.Wait, k, ctx.Err())
		}
	}
}

func (g *gate) mark(ctx context.Context, args json.RawMessage) (any, error) {
	g.note("mark:"+string(args), 0)
	return nil, nil
}

func (g *gate) snapshot() (events []string, started map[string]int, peak int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.events), clonedCounts(g.started), g.peak
}

func clonedCounts(m map[string]int) map[string]int {
	out := make(map[string]int, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func gateRunner(t *testing.T, g *gate, opts *spine.Options) *spine.Runner {
	return spinetest.NewRunner(t, spine.Manifest{
		"slow":      {Call: g.call, AllowEarlyRead: true},
		"feed.slow": {Call: g.call, AllowEarlyRead: true},
		"plain":     {Call: g.call}, // same tool, no early reads
		"mark":      {Call: g.mark},
	}, opts)
}

// TestPLMEarlyReadsOverlap checks each rule of the pass by its effect. A gate
// call returns only once the keys it waits for have started, and the program
// reaches those calls only after it returns: so a run that ends with the right
// value (rather than a gate time-out) started them early. Each key starts
// exactly once: the program's call claimed the prepared read.
func TestPLMEarlyReadsOverlap(t *testing.T) {
	inputs := map[string]any{"x": "a", "y": "b", "flag": true, "keys": []string{"k1", "k2", "k3", "k4", "k5", "k6", "k7", "k8"}}
	for _, tc := range []struct {
		name, src, want string
		reads           int
	}{
		{"straight line", `a = slow(k="a", wait=["b"])
b = slow(k="b")
result = [a, b]`, `["v:a","v:b"]`, 2},
		{"inputs and namespaces", `a = slow(k=inputs["x"], wait=[inputs["y"]])
b = feed.slow(k=inputs["y"])
result = [a, b]`, `["v:a","v:b"]`, 2},
		{"if branch on entry", `if inputs["flag"]:
    a = slow(k="a", wait=["b"])
    b = slow(k="b")
else:
    a = b = slow(k="never")
result = [a, b]`, `["v:a","v:b"]`, 2},
		{"try body", `a = slow(k="a", wait=["b", "c"])
try:
    b = slow(k="b")
    c = slow(k="c")
except RuntimeError:
    b = c = None
result = [a, b, c]`, `["v:a","v:b","v:c"]`, 3},
		{"for loop", `out = []
for s in inputs["keys"]:
    out.append(slow(k=s, wait=inputs["keys"]))
result = len(out)`, `8`, 8},
		{"comprehension", `result = len([slow(k=s, wait=inputs["keys"]) for s in inputs["keys"]])`, `8`, 8},
		{"dict comprehension over range", `result = len({i: slow(k=i, wait=["0", "1", "2"]) for i in range(3)})`, `3`, 3},
		{"with body", `import contextlib
with contextlib.nullcontext():
    a = slow(k="a", wait=["b"])
    b = slow(k="b")
result = [a, b]`, `["v:a","v:b"]`, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGate()
			out := spinetest.MustRun(t, gateRunner(t, g, nil), spine.Request{Source: tc.src, Inputs: inputs, EarlyReads: true})
			_, started, _ := g.snapshot()
			if string(out.Value) != tc.want {
				t.Fatalf("value %s, want %s", out.Value, tc.want)
			}
			if started["never"] != 0 {
				t.Errorf("a read in a branch not taken was started")
			}
			if len(started) != tc.reads || out.ToolCalls != tc.reads {
				t.Errorf("%d keys started, %d tool calls, want %d", len(started), out.ToolCalls, tc.reads)
			}
			for k, n := range started {
				if n != 1 {
					t.Errorf("%s started %d times: the call did not claim its read", k, n)
				}
			}
		})
	}
}

// TestPLMDependentReadsInOrder: a read that needs another's value starts after it.
func TestPLMDependentReadsInOrder(t *testing.T) {
	g := newGate()
	out := spinetest.MustRun(t, gateRunner(t, g, nil), spine.Request{Source: `a = slow(k="a")
b = slow(k=a)
c = slow(k=b + "!")
result = c`, EarlyReads: true})
	events, _, peak := g.snapshot()
	if string(out.Value) != `"v:v:v:a!"` || peak != 1 {
		t.Fatalf("value %s, peak %d", out.Value, peak)
	}
	want := []string{"start:a", "end:a", "start:v:a", "end:v:a", "start:v:v:a!", "end:v:v:a!"}
	if !slices.Equal(events, want) {
		t.Fatalf("events %v, want %v", events, want)
	}
}

// TestPLMNonEarlyToolsAreNotStartedEarly: only AllowEarlyRead tools are prepared.
func TestPLMNonEarlyToolsAreNotStartedEarly(t *testing.T) {
	g := newGate()
	out := spinetest.MustRun(t, gateRunner(t, g, nil), spine.Request{Source: `mark(at=1)
a = plain(k="p")
mark(at=2)
b = slow(k="s")
result = [a, b]`, EarlyReads: true})
	events, _, _ := g.snapshot()
	if string(out.Value) != `["v:p","v:s"]` {
		t.Fatalf("value %s", out.Value)
	}
	i1, ip, i2 := slices.Index(events, `mark:{"at":1}`), slices.Index(events, "start:p"), slices.Index(events, `mark:{"at":2}`)
	if !(0 <= i1 && i1 < ip && ip < i2) {
		t.Fatalf("the non-early tool ran out of order: %v", events)
	}
}

// TestPLMOffStartsNothingEarly: without Request.EarlyReads no read is started early.
func TestPLMOffStartsNothingEarly(t *testing.T) {
	g := newGate()
	r := gateRunner(t, g, nil)
	out := spinetest.MustRun(t, r, spine.Request{Source: `mark(at=1)
a = slow(k="a")
result = a`})
	events, _, _ := g.snapshot()
	if string(out.Value) != `"v:a"` || !slices.Equal(events, []string{`mark:{"at":1}`, "start:a", "end:a"}) {
		t.Fatalf("value %s, events %v", out.Value, events)
	}
}

// TestPLMChangedArgumentsCallNormally: a read prepared with arguments the
// program then changes is not claimed; the call is made with the new ones,
// and the unclaimed read is not counted as a tool call.
func TestPLMChangedArgumentsCallNormally(t *testing.T) {
	src := `d = {"k": "a"}
def change():
    d["k"] = "b"
change()
result = slow(k=d["k"])`
	g := newGate()
	out := spinetest.MustRun(t, gateRunner(t, g, nil), spine.Request{Source: src, EarlyReads: true})
	_, started, _ := g.snapshot()
	if string(out.Value) != `"v:b"` || out.ToolCalls != 1 {
		t.Fatalf("value %s, ToolCalls %d", out.Value, out.ToolCalls)
	}
	if started["a"] != 1 || started["b"] != 1 {
		t.Fatalf("started %v: want the stale read prepared once and the real call made once", started)
	}
}

// TestPLMSameOutcomes runs programs with early reads off and on: value,
// output, error and tool calls are the same.
func TestPLMSameOutcomes(t *testing.T) {
	for _, src := range []string{
		`x = slow(k="err")`,
		"try:\n    slow(k=\"err\")\nexcept RuntimeError as e:\n    print('caught', e)\nresult = slow(k=1)",
		"a = slow(k=1)\nprint(a)\nb = slow(k=1 / 0)",
		"def f(k):\n    return slow(k=k)\nresult = [f(i) for i in range(3)] + [slow(k=i) for i in range(3)]",
		"import builtins\nresult = [sorted(globals()), [n for n in dir(builtins) if n.startswith('__spine')], slow(k=1)]",
		"slow = lambda k: ('mine', k)\nresult = slow(k=1)",
		"x = [slow(k=i) for i in range(100)]\nresult = len(x)",
		"result = plain(k=slow(k='a'))",
	} {
		t.Run(src, func(t *testing.T) {
			g := newGate()
			r := gateRunner(t, g, nil)
			outs := [2]*spine.Output{}
			errs := [2]error{}
			for i, early := range []bool{false, true} {
				outs[i], errs[i] = r.Run(context.Background(), spine.Request{Source: src, EarlyReads: early})
			}
			if fmt.Sprint(errs[0]) != fmt.Sprint(errs[1]) {
				t.Fatalf("errors differ:\noff: %v\non:  %v", errs[0], errs[1])
			}
			var pe [2]*spine.PythonError
			if errors.As(errs[0], &pe[0]) && errors.As(errs[1], &pe[1]) && *pe[0] != *pe[1] {
				t.Fatalf("Python errors differ:\noff: %#v\non:  %#v", pe[0], pe[1])
			}
			if string(outs[0].Value) != string(outs[1].Value) || outs[0].Stdout != outs[1].Stdout || outs[0].ToolCalls != outs[1].ToolCalls {
				t.Fatalf("outcomes differ:\noff: %s %q %d\non:  %s %q %d", outs[0].Value, outs[0].Stdout, outs[0].ToolCalls, outs[1].Value, outs[1].Stdout, outs[1].ToolCalls)
			}
		})
	}
}

// TestPLMBudget: claimed early reads count against MaxToolCalls exactly like
// calls; prepared reads the program never claims do not.
func TestPLMBudget(t *testing.T) {
	src := `out = []
for i in range(5):
    try:
        out.append(slow(k=i))
    except RuntimeError as e:
        out.append(str(e))
result = out`
	g := newGate()
	r := gateRunner(t, g, &spine.Options{MaxToolCalls: 3})
	for _, early := range []bool{false, true} {
		out, err := r.Run(context.Background(), spine.Request{Source: src, EarlyReads: early})
		if err != nil {
			t.Fatal(err)
		}
		if string(out.Value) != `["v:0","v:1","v:2","tool call budget exhausted","tool call budget exhausted"]` || out.ToolCalls != 3 {
			t.Fatalf("early %v: value %s, ToolCalls %d", early, out.Value, out.ToolCalls)
		}
	}
}

// TestPLMPendingCap: past MaxPendingEarlyReads the program still gets every value.
func TestPLMPendingCap(t *testing.T) {
	g := newGate()
	r := gateRunner(t, g, &spine.Options{MaxPendingEarlyReads: 2})
	out := spinetest.MustRun(t, r, spine.Request{Source: "result = [slow(k=i) for i in range(10)] + [slow(k='x'), slow(k='y'), slow(k='z')]", EarlyReads: true})
	_, started, peak := g.snapshot()
	if !strings.HasPrefix(string(out.Value), `["v:0","v:1",`) || out.ToolCalls != 13 {
		t.Fatalf("value %s, ToolCalls %d", out.Value, out.ToolCalls)
	}
	for k, n := range started {
		if n != 1 {
			t.Errorf("%s started %d times", k, n)
		}
	}
	if peak > 3 {
		t.Errorf("%d reads in flight with a pending cap of 2", peak)
	}
}
