package tests

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/internal/spinetest"
)

// TestWholeProgramChainStartsEarly: with EarlyReads on, c's read, whose key
// needs the values of a and b, starts once they have arrived — while the
// program still loops before a — and the program's call claims it. The loop
// ends only because the read started (probe says so), before the program
// reached c.
func TestWholeProgramChainStartsEarly(t *testing.T) {
	tools := spinetest.NewChainTools()
	r := spinetest.NewRunner(t, tools.Manifest(), spinetest.ChainOptions)
	out, err := r.Run(context.Background(), spine.Request{Source: spinetest.ChainSource(1<<30, ""), EarlyReads: true})
	if err != nil {
		t.Fatal(err)
	}
	if string(out.Value) != `{"key":"alpha-beta"}` {
		t.Fatalf("value %s", out.Value)
	}
	events := tools.Log()
	start, probed := spinetest.Index(events, "start:alpha-beta"), spinetest.Index(events, "probe:true")
	if start < 0 || probed < 0 || start > probed {
		t.Fatalf("the chained read did not start before the program reached it: %v", events)
	}
	if c := spinetest.LastSlow(t, out); !c.Early {
		t.Fatalf("c's call was not answered by the chained read: %+v", out.Calls)
	}
	if n := strings.Count(strings.Join(events, " "), "start:alpha-beta"); n != 1 {
		t.Fatalf("c's read started %d times: %v", n, events)
	}
	t.Logf("%d probes before the chained read had started", out.ToolCalls-3)
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
		tools := spinetest.NewChainTools()
		if !early {
			tools.Ungated()
		}
		r := spinetest.NewRunner(t, tools.Manifest(), spinetest.ChainOptions)
		out, err := r.Run(context.Background(), spine.Request{Source: spinetest.ChainSource(limit, between), EarlyReads: early})
		if err != nil {
			t.Fatal(err)
		}
		return out, tools.Log()
	}
	on, events := run(true, 1<<30)
	off, _ := run(false, 1)
	if spinetest.Index(events, "start:alpha-beta") < 0 || spinetest.Index(events, "start:gamma-beta") < 0 {
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
	if slows(on) != 3 || slows(off) != 3 || spinetest.LastSlow(t, on).Early {
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
	tools := spinetest.NewChainTools()
	r := spinetest.NewRunner(t, tools.Manifest(), spinetest.ChainOptions)
	s := spinetest.NewSession(t, r)
	out, err := s.Run(context.Background(), spine.Request{Source: spinetest.ChainSource(1<<30, ""), EarlyReads: true})
	if err != nil {
		t.Fatal(err)
	}
	events := tools.Log()
	if start, probed := spinetest.Index(events, "start:alpha-beta"), spinetest.Index(events, "probe:true"); start < 0 || probed < 0 || start > probed {
		t.Fatalf("the chained read did not start early in a session: %v", events)
	}
	if !spinetest.LastSlow(t, out).Early {
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
	tools := spinetest.NewChainTools()
	r := spinetest.NewRunner(t, tools.Manifest(), spinetest.ChainOptions)
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
	tools := spinetest.NewChainTools()
	r := spinetest.NewRunner(t, tools.Manifest(), spinetest.ChainOptions)
	hostile := `import sys, json
def loud(*args, **kwargs):
    print("program code ran")
json.loads = loud
json._default_decoder = None
sys.settrace(print)
`
	src := hostile + spinetest.ChainSource(1<<30, "") + "sys.settrace(None)\n"
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
	events := tools.Log()
	if start, probed := spinetest.Index(events, "start:alpha-beta"), spinetest.Index(events, "probe:true"); start < 0 || probed < 0 || start > probed {
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
for _ in range(` + strconv.Itoa(calls) + `):
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
