package spine_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/internal/spinetest"
)

// chainTools are the tools of the chained-read tests. slow is an early read
// that answers {"key": key}; probe (not early) first waits until slow has
// returned for "alpha" and "beta", then says whether the read for
// "alpha-beta" — the chained one — has started. Events are recorded in order,
// so the tests prove order with the tools' own gates, never with time.
type chainTools struct {
	mu      sync.Mutex
	events  []string
	started map[string]bool
	left    int
	ab      chan struct{} // closed once alpha and beta have returned
}

func newChainTools() *chainTools {
	return &chainTools{started: map[string]bool{}, left: 2, ab: make(chan struct{})}
}

// ungated is for a run with early reads off, where a and b start only when
// the program reaches them: probe does not wait for them.
func (c *chainTools) ungated() *chainTools {
	close(c.ab)
	c.left = -1
	return c
}

func (c *chainTools) manifest() spine.Manifest {
	return spine.Manifest{
		"slow": {AllowEarlyRead: true, Call: func(ctx context.Context, args json.RawMessage) (any, error) {
			var a struct {
				Key string `json:"key"`
			}
			if err := json.Unmarshal(args, &a); err != nil {
				return nil, err
			}
			c.mu.Lock()
			defer c.mu.Unlock()
			c.events = append(c.events, "start:"+a.Key)
			c.started[a.Key] = true
			if a.Key == "alpha" || a.Key == "beta" {
				if c.left--; c.left == 0 {
					close(c.ab)
				}
			}
			return map[string]string{"key": a.Key}, nil
		}},
		"probe": {Call: func(ctx context.Context, _ json.RawMessage) (any, error) {
			select {
			case <-c.ab:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			c.mu.Lock()
			defer c.mu.Unlock()
			ok := c.started["alpha-beta"]
			if ok {
				c.events = append(c.events, "probe:true")
			} else {
				c.events = append(c.events, "probe:false")
			}
			return ok, nil
		}},
	}
}

// chainOptions leave the probe loops room: a probe is a tool call, and how many
// the program makes before the wake depends on when the reads' goroutines
// get to run.
var chainOptions = &spine.Options{MaxToolCalls: 1 << 20}

func (c *chainTools) log() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.events...)
}

// index is where event first occurs in events, -1 if it does not.
func index(events []string, event string) int {
	for i, e := range events {
		if e == event {
			return i
		}
	}
	return -1
}

// chainSource waits (probe) until a and b have arrived and then, up to limit
// rounds, until the chained read of c has started; only then does the program
// reach a, b and c. The reads of a and b are prepared at its top.
func chainSource(limit int, between string) string {
	return "for i in range(" + itoa(limit) + "):\n    if probe():\n        break\n" +
		"a = slow(key=\"alpha\")\nb = slow(key=\"beta\")\n" + between +
		"c = slow(key=a[\"key\"] + \"-\" + b[\"key\"])\nresult = c\n"
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// lastSlow is the record of the program's last call of slow: c's.
func lastSlow(t *testing.T, out *spine.Output) spine.ToolCall {
	t.Helper()
	var last *spine.ToolCall
	for i := range out.Calls {
		if out.Calls[i].Tool == "slow" {
			last = &out.Calls[i]
		}
	}
	if last == nil {
		t.Fatalf("no call of slow in %+v", out.Calls)
	}
	return *last
}

// TestWholeProgramChainStartsEarly: with EarlyReads on, c's read, whose key
// needs the values of a and b, starts once they have arrived — while the
// program still loops before a — and the program's call claims it. The loop
// ends only because the read started (probe says so), before the program
// reached c.
func TestWholeProgramChainStartsEarly(t *testing.T) {
	tools := newChainTools()
	r := spinetest.NewRunner(t, tools.manifest(), chainOptions)
	out, err := r.Run(context.Background(), spine.Request{Source: chainSource(1<<30, ""), EarlyReads: true})
	if err != nil {
		t.Fatal(err)
	}
	if string(out.Value) != `{"key":"alpha-beta"}` {
		t.Fatalf("value %s", out.Value)
	}
	events := tools.log()
	start, probed := index(events, "start:alpha-beta"), index(events, "probe:true")
	if start < 0 || probed < 0 || start > probed {
		t.Fatalf("the chained read did not start before the program reached it: %v", events)
	}
	if c := lastSlow(t, out); !c.Early {
		t.Fatalf("c's call was not answered by the chained read: %+v", out.Calls)
	}
	if n := strings.Count(strings.Join(events, " "), "start:alpha-beta"); n != 1 {
		t.Fatalf("c's read started %d times: %v", n, events)
	}
	t.Logf("%d probes before the chained read had started", out.ToolCalls-3)
}

// TestWholeProgramChainNeedsTheWake is the negative control: the same program
// on a Runner that never wakes the Guest. Nothing starts c's read while the
// program loops; it starts only when the program reaches c.
func TestWholeProgramChainNeedsTheWake(t *testing.T) {
	tools := newChainTools()
	r := spinetest.NewRunner(t, tools.manifest(), chainOptions)
	spine.NoWake(r)
	out, err := r.Run(context.Background(), spine.Request{Source: chainSource(200, ""), EarlyReads: true})
	if err != nil {
		t.Fatal(err)
	}
	if string(out.Value) != `{"key":"alpha-beta"}` {
		t.Fatalf("value %s", out.Value)
	}
	events := tools.log()
	if index(events, "probe:true") >= 0 {
		t.Fatalf("c's read started while the program looped, without a wake: %v", events)
	}
	if start := index(events, "start:alpha-beta"); start < len(events)-1 {
		t.Fatalf("c's read started before the loop ended: %v", events)
	}
	if c := lastSlow(t, out); c.Early {
		t.Fatalf("c's call was answered early without a wake: %+v", out.Calls)
	}
}

// TestWholeProgramChainMismatch: the program changes a's value (through
// another name for its object) after the chained read started, so c's call
// computes other bytes: the chained read is not claimed (it is cancelled with
// the run), the call is made as it is with early reads off, and the run's
// value and calls are the same as with early reads off (leaving out the
// probes, whose number depends on when the wake came).
func TestWholeProgramChainMismatch(t *testing.T) {
	between := "alias = a\nalias[\"key\"] = \"gamma\"\n"
	run := func(early bool, limit int) (*spine.Output, []string) {
		tools := newChainTools()
		if !early {
			tools.ungated()
		}
		r := spinetest.NewRunner(t, tools.manifest(), chainOptions)
		out, err := r.Run(context.Background(), spine.Request{Source: chainSource(limit, between), EarlyReads: early})
		if err != nil {
			t.Fatal(err)
		}
		return out, tools.log()
	}
	on, events := run(true, 1<<30)
	off, _ := run(false, 1)
	if index(events, "start:alpha-beta") < 0 || index(events, "start:gamma-beta") < 0 {
		t.Fatalf("want the chained read and then the program's own call: %v", events)
	}
	if string(on.Value) != `{"key":"gamma-beta"}` || string(on.Value) != string(off.Value) {
		t.Fatalf("value on %s, off %s", on.Value, off.Value)
	}
	slows := func(out *spine.Output) (n int) {
		for _, c := range out.Calls {
			if c.Tool == "slow" {
				n++
			}
		}
		return n
	}
	if slows(on) != 3 || slows(off) != 3 || lastSlow(t, on).Early {
		t.Fatalf("calls of slow: on %+v, off %+v", on.Calls, off.Calls)
	}
	if on.ToolCalls != len(on.Calls) || off.ToolCalls != len(off.Calls) {
		t.Fatalf("tool calls on %d (%d recorded), off %d (%d recorded)", on.ToolCalls, len(on.Calls), off.ToolCalls, len(off.Calls))
	}
	if on.Stdout != off.Stdout || on.Stderr != off.Stderr {
		t.Fatalf("output on %q %q, off %q %q", on.Stdout, on.Stderr, off.Stdout, off.Stderr)
	}
}

// TestSessionChainStartsEarly: a session's run chains as a single run does,
// and the next run of the session, whatever wake is still pending, is not
// disturbed.
func TestSessionChainStartsEarly(t *testing.T) {
	tools := newChainTools()
	r := spinetest.NewRunner(t, tools.manifest(), chainOptions)
	s := spinetest.NewSession(t, r)
	out, err := s.Run(context.Background(), spine.Request{Source: chainSource(1<<30, ""), EarlyReads: true})
	if err != nil {
		t.Fatal(err)
	}
	events := tools.log()
	if start, probed := index(events, "start:alpha-beta"), index(events, "probe:true"); start < 0 || probed < 0 || start > probed {
		t.Fatalf("the chained read did not start early in a session: %v", events)
	}
	if !lastSlow(t, out).Early {
		t.Fatalf("c's call was not answered by the chained read: %+v", out.Calls)
	}
	out, err = s.Run(context.Background(), spine.Request{Source: "d = slow(key=c[\"key\"] + \"!\")\nresult = [a, b, c, d]\n", EarlyReads: true})
	if err != nil {
		t.Fatal(err)
	}
	if want := `[{"key":"alpha"},{"key":"beta"},{"key":"alpha-beta"},{"key":"alpha-beta!"}]`; string(out.Value) != want {
		t.Fatalf("second run: %s, want %s", out.Value, want)
	}
}

// TestProgramCannotPeekThroughPeek: a program that imports _spine and asks
// after a pending read gets nothing (peek answers values only in the Guest's
// own windows), and the old way of asking, a call of the tool "" with
// {"peek": id}, is a call of an unknown tool.
func TestProgramCannotPeekThroughPeek(t *testing.T) {
	tools := newChainTools()
	r := spinetest.NewRunner(t, tools.manifest(), chainOptions)
	src := `import _spine
probe()
seen = [_spine.peek(h) for h in range(4)]
try:
    raw = _spine.call(b'{"tool":"","args":{"peek":1}}')
except Exception as e:
    raw = repr(e)
a = slow(key="alpha")
b = slow(key="beta")
result = [seen, raw.decode() if isinstance(raw, bytes) else raw, a, b]
`
	out, err := r.Run(context.Background(), spine.Request{Source: src, EarlyReads: true})
	if err != nil {
		t.Fatal(err)
	}
	want := `[[null,null,null,null],"{\"value\":null,\"error\":\"unknown tool: \"}",{"key":"alpha"},{"key":"beta"}]`
	if string(out.Value) != want {
		t.Fatalf("got %s\nwant %s", out.Value, want)
	}
}

// TestChainStepRunsNoProgramCode: the program patches what the chain step
// could reach — the json module's functions — and traces every frame with a
// trace function that prints it (print itself, so that the step, were it
// traced, would show wherever it runs), and the chain still starts c's read
// early with none of it run for the step: no frame of the step printed,
// nothing of the patches.
func TestChainStepRunsNoProgramCode(t *testing.T) {
	tools := newChainTools()
	r := spinetest.NewRunner(t, tools.manifest(), chainOptions)
	hostile := `import sys, json
def loud(*args, **kwargs):
    print("program code ran")
json.loads = loud
json._default_decoder = None
sys.settrace(print)
`
	src := hostile + chainSource(1<<30, "") + "sys.settrace(None)\n"
	out, err := r.Run(context.Background(), spine.Request{Source: src, EarlyReads: true})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"key":"alpha-beta"}`; string(out.Value) != want {
		t.Fatalf("got %s, want %s", out.Value, want)
	}
	if !strings.Contains(out.Stdout, "code invoke_tool>") || out.StdoutTruncated {
		t.Fatalf("the trace function did not see the program's calls: %q", out.Stdout)
	}
	for _, name := range []string{"chain_step", "step", "advance", "peek", "_run", "loud"} {
		if strings.Contains(out.Stdout, "code "+name+">") {
			t.Fatalf("the trace function saw %s: %q", name, out.Stdout)
		}
	}
	if strings.Contains(out.Stdout, "program code ran") || out.Stderr != "" {
		t.Fatalf("output %q %q", out.Stdout, out.Stderr)
	}
	events := tools.log()
	if start, probed := index(events, "start:alpha-beta"), index(events, "probe:true"); start < 0 || probed < 0 || start > probed {
		t.Fatalf("the chained read did not start early: %v", events)
	}
}

// TestHandedReadsAreAccounted: the chain step shares the interpreter with the
// program, so a program can make it hand over the response of a read it
// prepared itself and never claim it (here by planting a waiting candidate in
// plm.chain). The Host does not rely on the step: a response it hands to the
// Guest must fit in MaxToolCalls, and if the program never claims it, it is
// on the record as Unclaimed.
func TestHandedReadsAreAccounted(t *testing.T) {
	returned := make(chan struct{})
	m := spine.Manifest{
		"secret": {AllowEarlyRead: true, Call: func(ctx context.Context, args json.RawMessage) (any, error) {
			defer close(returned)
			return "s3cret", nil
		}},
		// wait returns once secret has: the program then asks for a wake.
		"wait": {Call: func(ctx context.Context, _ json.RawMessage) (any, error) {
			select {
			case <-returned:
				return true, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}},
	}
	src := func(calls int) string {
		return `import sys, _spine
ch = sys.modules["plm.chain"]
h = _spine.prepare(b'{"tool":"secret","args":{}}')
for _ in range(` + itoa(calls) + `):
    wait()
seen = []
class Evil:
    @property
    def free(self):
        v = _spine.peek(h)
        if v:
            seen.append(v.decode())
        return set()
    def plan(self, *a):
        return None
ch._waiting = [Evil()]
_spine.peek(0)
for i in range(1 << 20):
    if seen:
        break
result = {"h": h, "stolen": seen}
`
	}
	// Asked outside the window, peek hands nothing over (the C side offers no
	// room): nothing goes on the record.
	t.Run("outside the window", func(t *testing.T) {
		returned = make(chan struct{})
		r := spinetest.NewRunner(t, m, &spine.Options{MaxToolCalls: 8})
		out, err := r.Run(context.Background(), spine.Request{Source: `import _spine
h = _spine.prepare(b'{"tool":"secret","args":{}}')
wait()
result = [h, _spine.peek(h)]
`, EarlyReads: true})
		if err != nil {
			t.Fatal(err)
		}
		if string(out.Value) != "[1,null]" || out.ToolCalls != 1 || len(out.Calls) != 1 || out.Calls[0].Unclaimed {
			t.Fatalf("value %s, %d calls, record %+v", out.Value, out.ToolCalls, out.Calls)
		}
	})
	for _, c := range []struct {
		name      string
		calls     int // calls of wait before the step
		max       int
		mayHandIt bool
	}{
		{"budget left", 1, 8, true},
		{"budget used", 2, 2, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			returned = make(chan struct{})
			r := spinetest.NewRunner(t, m, &spine.Options{MaxToolCalls: c.max})
			out, err := r.Run(context.Background(), spine.Request{Source: src(c.calls), EarlyReads: true})
			if err != nil {
				t.Fatal(err)
			}
			var v struct {
				H      int      `json:"h"`
				Stolen []string `json:"stolen"`
			}
			if err := json.Unmarshal(out.Value, &v); err != nil || v.H == 0 {
				t.Fatalf("value %s (%v): the read was not prepared", out.Value, err)
			}
			if out.ToolCalls != c.calls {
				t.Fatalf("ToolCalls %d, want %d (the program's calls only)", out.ToolCalls, c.calls)
			}
			var unclaimed []spine.ToolCall
			for _, call := range out.Calls {
				if call.Unclaimed {
					unclaimed = append(unclaimed, call)
				}
			}
			switch {
			case !c.mayHandIt && len(v.Stolen) > 0:
				t.Fatalf("the Host handed over %q with the budget used", v.Stolen)
			case len(v.Stolen) > 0 && (len(unclaimed) != 1 || unclaimed[0].Tool != "secret" || !unclaimed[0].Early):
				t.Fatalf("the response reached the Guest but the record is %+v", out.Calls)
			case len(v.Stolen) == 0 && len(unclaimed) != 0:
				t.Fatalf("nothing was handed over but the record is %+v", out.Calls)
			}
		})
	}
}
