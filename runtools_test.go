package spine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
)

// askTool answers {"q": ...} with "answer to <q>", counting its calls.
func askTool(calls *atomic.Int32) ToolSpec {
	return ToolSpec{
		Call: func(ctx context.Context, args json.RawMessage) (any, error) {
			calls.Add(1)
			var a struct {
				Q string `json:"q"`
			}
			if err := json.Unmarshal(args, &a); err != nil {
				return nil, err
			}
			return "answer to " + a.Q, nil
		},
		Description: "Ask a question.",
		InputSchema: json.RawMessage(`{"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}`),
	}
}

// TestRunTools: a run's own tools sit beside the Runner's, with their stubs'
// argument checks and positional order; the next run does not see them; and
// the prepared image is the Runner's whatever the tools.
func TestRunTools(t *testing.T) {
	r := newRunner(t, Manifest{"lookup": testManifest()["lookup"], "crm.get": testManifest()["echo"]}, nil)
	ctx := context.Background()
	var calls atomic.Int32
	tools := Manifest{"ask": askTool(&calls), "crm.search": askTool(&calls)}
	out, err := r.Run(ctx, Request{Source: `[ask("a"), ask(q="b"), crm.search("c"), lookup(key="book"), crm.get(x=1)["x"]]`, Tools: tools})
	if err != nil {
		t.Fatal(err)
	}
	if got := string(out.Value); got != `["answer to a","answer to b","answer to c",21,1]` {
		t.Errorf("value %s", got)
	}
	if calls.Load() != 3 || out.ToolCalls != 5 {
		t.Errorf("%d calls of the run's tools, %d in all", calls.Load(), out.ToolCalls)
	}
	_, err = r.Run(ctx, Request{Source: `ask()`, Tools: tools})
	var pyErr *PythonError
	if !errors.As(err, &pyErr) || pyErr.Type != "TypeError" || !strings.Contains(pyErr.Message, "'q'") {
		t.Errorf("ask() without its argument: %v", err)
	}
	if calls.Load() != 3 {
		t.Errorf("a call refused in the Guest reached the tool")
	}
	for src, want := range map[string]string{
		`ask(q="a")`:        "NameError",
		`crm.search(q="a")`: "AttributeError",
	} {
		_, err := r.Run(ctx, Request{Source: src})
		if !errors.As(err, &pyErr) || pyErr.Type != want {
			t.Errorf("%s in a run without the tools: %v, want %s", src, err, want)
		}
	}
	if got := string(mustRun(t, r, Request{Source: `crm.get(x=2)["x"]`}).Value); got != "2" {
		t.Errorf("the Runner's crm.get after a run that added to crm: %s", got)
	}
}

func mustRun(t *testing.T, r *Runner, req Request) *Output {
	t.Helper()
	out, err := r.Run(context.Background(), req)
	if err != nil {
		t.Fatalf("%q: %v", req.Source, err)
	}
	return out
}

// TestRunToolsRefused: a run's tools may not take a name of the Runner's, be
// a namespace of one of its tools or have one as theirs, nor be bad names;
// the run is refused before it starts, naming the tool.
func TestRunToolsRefused(t *testing.T) {
	r := newRunner(t, Manifest{"lookup": testManifest()["lookup"], "crm.get": testManifest()["echo"]}, nil)
	var calls atomic.Int32
	for name, want := range map[string]string{
		"lookup":        `"lookup" is one of the Runner's tools`,
		"crm":           `"crm" clashes with the Runner's tool "crm.get"`,
		"crm.get.more":  `"crm.get.more" clashes with the Runner's tool "crm.get"`,
		"lookup.deeper": `"lookup.deeper" clashes with the Runner's tool "lookup"`,
		"print":         "would shadow a Python builtin",
		"a-b":           "not a Python identifier",
	} {
		_, err := r.Run(context.Background(), Request{Source: "1", Tools: Manifest{name: askTool(&calls)}})
		if !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), want) {
			t.Errorf("tool %q: %v, want ErrBadRequest saying %s", name, err, want)
		}
	}
	_, err := r.Run(context.Background(), Request{Source: "1", Tools: Manifest{"nocall": {}}})
	if !errors.Is(err, ErrBadRequest) {
		t.Errorf("a tool without Call: %v", err)
	}
}

// TestRunToolsSession: in a session, a run's tools are there for that run
// only; a name they shadowed is the session's again after it, and one the
// program rebound during the run keeps what the program gave it.
func TestRunToolsSession(t *testing.T) {
	r := newRunner(t, Manifest{"crm.get": testManifest()["echo"]}, &Options{Sessions: SessionOptions{MaxLive: 2}})
	s := newSession(t, r)
	ctx := context.Background()
	var calls atomic.Int32
	tools := Manifest{"ask": askTool(&calls), "crm.search": askTool(&calls)}
	if got := step(t, s, `ask = 5`+"\n"+`ask`); got != "5" {
		t.Fatalf("ask: %s", got)
	}
	out, err := s.Run(ctx, Request{Source: `f = crm.search` + "\n" + `[ask("x"), f("y")]`, Tools: tools})
	if err != nil {
		t.Fatal(err)
	}
	if got := string(out.Value); got != `["answer to x","answer to y"]` {
		t.Errorf("value %s", got)
	}
	if got := step(t, s, `[ask, hasattr(crm, "search"), crm.get(k=3)["k"]]`); got != `[5,false,3]` {
		t.Errorf("after the run with tools: %s", got)
	}
	// f still holds the proxy of a tool the session no longer has: calling
	// it is an unknown tool, raised in the program.
	_, err = s.Run(ctx, Request{Source: `f(q="z")`})
	var pyErr *PythonError
	if !errors.As(err, &pyErr) || !strings.Contains(pyErr.Message, "unknown tool: crm.search") {
		t.Errorf("a proxy kept past its run: %v", err)
	}
	out, err = s.Run(ctx, Request{Source: `ask = ask("again")` + "\n" + `ask`, Tools: tools})
	if err != nil || string(out.Value) != `"answer to again"` {
		t.Fatalf("%v %s", err, out.Value)
	}
	if got := step(t, s, `ask`); got != `"answer to again"` {
		t.Errorf("a name the program rebound during the run: %s", got)
	}
	if calls.Load() != 3 {
		t.Errorf("%d calls", calls.Load())
	}
}

// TestRunToolsEarlyReads: a run's tool with AllowEarlyRead is read early as
// a Runner's is, with early reads on and in prefix mode.
func TestRunToolsEarlyReads(t *testing.T) {
	r := newRunner(t, Manifest{}, nil)
	var calls atomic.Int32
	spec := askTool(&calls)
	spec.AllowEarlyRead = true
	src := "xs = []\nfor q in ['a', 'b', 'c']:\n    xs.append(ask(q=q))\nxs"
	for _, req := range []Request{
		{Source: src, EarlyReads: true},
		{Stream: strings.NewReader(src)},
	} {
		req.Tools = Manifest{"ask": spec}
		out, err := r.Run(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if got := string(out.Value); got != `["answer to a","answer to b","answer to c"]` {
			t.Errorf("value %s", got)
		}
		early := 0
		for _, c := range out.Calls {
			if c.Early {
				early++
			}
		}
		if early != 3 {
			t.Errorf("stream %v: %d of %d calls early: %+v", req.Stream != nil, early, len(out.Calls), out.Calls)
		}
	}
}

// TestRunToolsFromElsewhere: a tool whose answer comes from another
// goroutine (as from another process): the run waits in the call until the
// answer is sent, and the program goes on with it.
func TestRunToolsFromElsewhere(t *testing.T) {
	r := newRunner(t, Manifest{}, nil)
	type call struct {
		args   json.RawMessage
		answer chan any
	}
	calls := make(chan call)
	elsewhere := ToolSpec{Call: func(ctx context.Context, args json.RawMessage) (any, error) {
		c := call{args, make(chan any, 1)}
		select {
		case calls <- c:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		select {
		case v := <-c.answer:
			return v, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}}
	go func() {
		for c := range calls {
			c.answer <- map[string]any{"got": c.args}
		}
	}()
	defer close(calls)
	out := mustRun(t, r, Request{Source: `weather(city="Paris")["got"]["city"]`, Tools: Manifest{"weather": elsewhere}})
	if string(out.Value) != `"Paris"` {
		t.Errorf("value %s", out.Value)
	}
}

// TestRunToolsCache: the Guest's form of a run's tools is the same bytes
// from the cache as written anew, whatever the order they come in; a tool
// under a namespace that is no early read goes by its name alone, with its
// namespace, its whole form asked for when the program reaches it
// (discoveryProxy).
func TestRunToolsCache(t *testing.T) {
	var calls atomic.Int32
	m := testManifest()
	m["ask"] = askTool(&calls)
	m["crm.search"] = askTool(&calls)
	m["crm.deep.find"] = askTool(&calls)
	m["crm.z"] = askTool(&calls)
	early := askTool(&calls)
	early.AllowEarlyRead = true
	m["crm.early"] = early
	var c guestToolCache
	wholeOnly := Manifest{}
	for name, spec := range m {
		if !strings.Contains(name, ".") || spec.AllowEarlyRead {
			wholeOnly[name] = spec
		}
	}
	want := guestRunTools{whole: encodeGuestTools(wholeOnly),
		lazy: json.RawMessage(`{"names":["crm.deep.find","crm.search","crm.z"],"spaces":["crm.deep","crm"]}`)}
	for range 2 {
		if got := c.encode(m); string(got.whole) != string(want.whole) || string(got.lazy) != string(want.lazy) {
			t.Fatalf("cached:\n%s\n%s\nwant:\n%s\n%s", got.whole, got.lazy, want.whole, want.lazy)
		}
		if got, want := c.tool("crm.search", m["crm.search"]), encodeGuestTool("crm.search", m["crm.search"]); string(got) != string(want) {
			t.Fatalf("crm.search asked for: %s, want %s", got, want)
		}
	}
	changed := askTool(&calls)
	changed.Description = "Ask something else."
	m["ask"] = changed
	if got := c.encode(m).whole; !strings.Contains(string(got), "Ask something else.") {
		t.Errorf("a changed description kept the old form: %s", got)
	}
	if got := c.encode(Manifest{"crm.search": m["crm.search"]}); got.whole != nil {
		t.Errorf("tools all by name alone sent %s whole", got.whole)
	}
}

// TestRunToolsWaiting: Request.Waiting names the call of a run's own tool
// the program waits for, and how many such calls have started: with early
// reads, all three reads of a loop have started when the program first
// waits; ToolCallOf gives each Call its number. A Runner's tool is not
// counted.
func TestRunToolsWaiting(t *testing.T) {
	r := newRunner(t, Manifest{"lookup": testManifest()["lookup"]}, nil)
	for _, early := range []bool{true, false} {
		// Each call answers once the program waits for it: then every
		// program's call is a wait, and the order is the program's.
		gates := map[int]chan struct{}{1: make(chan struct{}), 2: make(chan struct{}), 3: make(chan struct{})}
		var seen []int
		spec := ToolSpec{AllowEarlyRead: true, Call: func(ctx context.Context, args json.RawMessage) (any, error) {
			<-gates[ToolCallOf(ctx)]
			return ToolCallOf(ctx), nil
		}}
		req := Request{Source: "print('before')\nxs = [lookup(key='book')]\nfor q in ['a', 'b', 'c']:\n    xs.append(ask(q=q))\nxs",
			EarlyReads: early, Tools: Manifest{"ask": spec},
			Waiting: func(w ToolWait) {
				seen = append(seen, w.Call, w.Started)
				if w.Stdout != "before\n" {
					t.Errorf("stdout when waiting: %q", w.Stdout)
				}
				close(gates[w.Call])
			}}
		out := mustRun(t, r, req)
		if got := string(out.Value); got != `[21,1,2,3]` {
			t.Errorf("early %v: value %s", early, got)
		}
		want := "[1 1 2 2 3 3]"
		if early {
			want = "[1 3 2 3 3 3]"
		}
		if got := fmt.Sprint(seen); got != want {
			t.Errorf("early %v: Waiting saw (call, started) %s, want %s", early, got, want)
		}
	}
}

// TestRunToolsMadeWhenReached: a run's tools under a namespace reach the
// Guest by name alone and get their proxies when the program first reaches
// them, with the same signature, documentation, checks and help as a tool
// sent whole; dir() and the error for a missing tool list them before that.
func TestRunToolsMadeWhenReached(t *testing.T) {
	r := newRunner(t, nil, nil)
	var calls atomic.Int32
	tools := Manifest{"crm.search": askTool(&calls), "crm.other": askTool(&calls), "crm.deep.find": askTool(&calls)}
	src := `import bootstrap, inspect
before = [sorted(bootstrap._lazy_tools), "crm.search" in bootstrap._proxies_by_name, sorted(t for t in dir(crm) if not t.startswith("_"))]
help(crm.search)
[before, str(inspect.signature(crm.search)), crm.search.__doc__, crm.search.__name__, crm.search.__qualname__,
 "crm.other" in bootstrap._lazy_tools, "crm.search" in bootstrap._lazy_tools, crm.deep.find("x"), crm.search is crm.search]`
	out := mustRun(t, r, Request{Source: src, Tools: tools})
	want := `[[["crm.deep.find","crm.other","crm.search"],false,["deep","other","search"]],"(q: str) -> Any","Ask a question.","search","crm.search",true,false,"answer to x",true]`
	if got := string(out.Value); got != want {
		t.Errorf("value\n%s\nwant\n%s", got, want)
	}
	if !strings.Contains(out.Stdout, "search(q: str) -> Any") || !strings.Contains(out.Stdout, "Ask a question.") {
		t.Errorf("help(crm.search) printed:\n%s", out.Stdout)
	}
	if out.ToolCalls != 1 || calls.Load() != 1 {
		t.Errorf("%d tool calls, %d of the run's tools: making a proxy is no call of the program", out.ToolCalls, calls.Load())
	}
	streamed := mustRun(t, r, Request{Stream: strings.NewReader(`crm.search("s")`), Tools: tools})
	if string(streamed.Value) != `"answer to s"` {
		t.Errorf("a streamed program's crm.search: %s", streamed.Value)
	}
	var pyErr *PythonError
	for src, want := range map[string]string{
		"crm.nope":           "module 'crm' has no tool 'nope'; its tools are: deep, other, search",
		"crm.search()":       "crm.search() missing 1 required positional argument: 'q'",
		"crm.search(1, q=2)": "crm.search() got multiple values for argument 'q'",
		`import bootstrap` + "\n" + `bootstrap.invoke_tool("__tools__.proxy", {"name": "lookup"})`: `no tool of the run is named "lookup"`,
	} {
		_, err := r.Run(context.Background(), Request{Source: src, Tools: tools})
		if !errors.As(err, &pyErr) || pyErr.Message != want {
			t.Errorf("%s: %v, want %q", src, err, want)
		}
	}
}
