package mcpserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/internal/spinetest"
	"github.com/spine-run/spine/mcpserver"
)

// The tests share one Runner of the test tools; gate holds programs.
var (
	testTools = spinetest.NewTools()
	manifest  = testTools.Manifest()
	gate      = testTools.Gate
	runner    *spine.Runner
)

func TestMain(m *testing.M) {
	spinetest.Main(m, &runner, manifest, nil)
}

// Check exercises a session the way every transport's test does: the tool
// list and description, a run, a Python error, bad arguments.
func check(t *testing.T, cs *mcp.ClientSession) {
	t.Helper()
	tools, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(tools.Tools) != 1 || tools.Tools[0].Name != mcpserver.ToolName {
		t.Fatalf("tools %+v", tools.Tools)
	}
	desc := tools.Tools[0].Description
	for _, want := range []string{"def lookup(key: str)", "Look up the price of an item by key.", "```python", "RuntimeError", "inputs"} {
		if !strings.Contains(desc, want) {
			t.Errorf("description lacks %q:\n%s", want, desc)
		}
	}
	schema, _ := json.Marshal(tools.Tools[0].InputSchema)
	if !strings.Contains(string(schema), `"required":["source"]`) {
		t.Errorf("input schema %s", schema)
	}

	res := call(t, cs, map[string]any{
		"source": "print('hello')\nresult = lookup(key='book') * inputs['quantity']",
		"inputs": map[string]any{"quantity": 3},
	})
	if res.IsError {
		t.Fatalf("run failed: %s", spinetest.Text(res))
	}
	structured, _ := json.Marshal(res.StructuredContent)
	var sc mcpserver.Result
	if err := json.Unmarshal(structured, &sc); err != nil || string(sc.Value) != "63" || sc.Stdout != "hello\n" || sc.Stderr != "" {
		t.Errorf("structuredContent %s", structured)
	}
	if spinetest.Text(res) != `{"value":63,"stdout":"hello\n"}` {
		t.Errorf("text %q", spinetest.Text(res))
	}

	res = call(t, cs, map[string]any{"source": "print('partial')\nlookup(key='unicorn')\n"})
	got := spinetest.Text(res)
	if !res.IsError || !strings.Contains(got, "Traceback (most recent call last):") || !strings.Contains(got, `File "<agent>", line 2`) ||
		!strings.Contains(got, `RuntimeError: no such key: "unicorn"`) || !strings.HasSuffix(got, "\n\nstdout:\npartial\n") {
		t.Errorf("Python error: IsError %v, text:\n%s", res.IsError, got)
	}
	if res.StructuredContent != nil {
		t.Errorf("structuredContent on an error: %v", res.StructuredContent)
	}

	for _, args := range []map[string]any{{}, {"source": ""}, {"source": "1", "inputs": []int{1}}, {"source": "1", "extra": 1}, {"source": 5}} {
		res := call(t, cs, args)
		if !res.IsError || !strings.HasPrefix(spinetest.Text(res), "bad arguments: ") {
			t.Errorf("%v: IsError %v, %q", args, res.IsError, spinetest.Text(res))
		}
	}
}

func call(t *testing.T, cs *mcp.ClientSession, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: mcpserver.ToolName, Arguments: args})
	if err != nil {
		t.Fatalf("CallTool %v: %v", args, err)
	}
	return res
}

func TestInMemory(t *testing.T) {
	check(t, spinetest.ConnectInMemory(t, mcpserver.New(runner, nil)))
}

func TestStreamableHTTP(t *testing.T) {
	server := mcpserver.New(runner, &mcpserver.Options{EarlyReads: true, Slots: 8})
	cs := spinetest.ConnectHTTP(t, spinetest.ServeHTTP(t, spinetest.MCPHandler(server)).URL)
	check(t, cs)

	// A client's calls may come at once: they take turns in its session.
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: mcpserver.ToolName, Arguments: map[string]any{
				"source": "inputs['i'] * lookup(key='book')", "inputs": map[string]any{"i": i},
			}})
			if err != nil || res.IsError || spinetest.Text(res) != fmt.Sprintf(`{"value":%d,"stdout":""}`, 21*i) {
				t.Errorf("call %d: %v %+v", i, err, res)
			}
		})
	}
	wg.Wait()
}

func TestTimeout(t *testing.T) {
	// A limit long enough for the print on a busy machine: the loop never
	// ends, so the run still times out.
	cs := spinetest.ConnectInMemory(t, mcpserver.New(runner, &mcpserver.Options{Timeout: 2 * time.Second}))
	res := call(t, cs, map[string]any{"source": "print('spinning')\nwhile True:\n    pass"})
	if !res.IsError || !strings.HasPrefix(spinetest.Text(res), "TimeoutError: the program did not finish within its time limit of 2s") ||
		!strings.Contains(spinetest.Text(res), "stdout:\nspinning") {
		t.Errorf("IsError %v, %q", res.IsError, spinetest.Text(res))
	}
}

func TestDescription(t *testing.T) {
	empty := mcpserver.Description(nil, &mcpserver.Options{Timeout: time.Minute})
	if !strings.Contains(empty, "No tools are available") || strings.Contains(empty, "```") || !strings.Contains(empty, "stopped after 1m0s") {
		t.Errorf("no tools:\n%s", empty)
	}
	full := mcpserver.Description(manifest, nil)
	if !strings.Contains(full, strings.TrimRight(spine.Stubs(manifest), "\n")) {
		t.Errorf("the description lacks the stubs:\n%s", full)
	}
}

func TestClientCancel(t *testing.T) {
	cs := spinetest.ConnectInMemory(t, mcpserver.New(runner, &mcpserver.Options{Timeout: time.Hour}))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: mcpserver.ToolName, Arguments: map[string]any{"source": "gate(wait=False)\nimport time\ntime.sleep(3600)"}})
		done <- err
	}()
	// Wait for the program to begin, then cancel the call: the SDK tells
	// the server, whose handler context ends the run.
	<-gate.Entered
	cancel()
	if err := <-done; err == nil {
		t.Fatal("a cancelled call succeeded")
	}
	// The session goes on.
	if res := call(t, cs, map[string]any{"source": "6 * 7"}); res.IsError || spinetest.Text(res) != `{"value":42,"stdout":""}` {
		t.Fatalf("after the cancel: %+v", res)
	}
}

// TestSlots: over streamable HTTP, a call past the slots is answered at once
// with "busy, retry" while the others run; a freed slot serves the next call.
// Each call is a client of its own: the calls of one client take turns.
func TestSlots(t *testing.T) {
	server := mcpserver.New(runner, &mcpserver.Options{Slots: 2})
	url := spinetest.ServeHTTP(t, spinetest.MCPHandler(server)).URL

	answers := make(chan *mcp.CallToolResult, 2)
	for range 2 {
		cs := spinetest.ConnectHTTP(t, url)
		go func() {
			res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: mcpserver.ToolName, Arguments: map[string]any{"source": "gate()"}})
			if err != nil {
				t.Error(err)
			}
			answers <- res
		}()
		<-gate.Entered // the call holds a slot: its program is in the tool
	}
	cs := spinetest.ConnectHTTP(t, url)
	res := call(t, cs, map[string]any{"source": "1"})
	if !res.IsError || !strings.HasPrefix(spinetest.Text(res), "busy, retry: all 2 run slots are in use") {
		t.Fatalf("a third call: IsError %v, %q", res.IsError, spinetest.Text(res))
	}
	gate.Let()
	if res := <-answers; res == nil || res.IsError || spinetest.Text(res) != `{"value":"opened","stdout":""}` {
		t.Fatalf("the first call: %+v", res)
	}
	// The answered call freed its slot before its answer was sent.
	if res := call(t, cs, map[string]any{"source": "6 * 7"}); res.IsError || spinetest.Text(res) != `{"value":42,"stdout":""}` {
		t.Fatalf("after a slot was freed: %q", spinetest.Text(res))
	}
	gate.Let()
	if res := <-answers; res == nil || res.IsError {
		t.Fatalf("the second call: %+v", res)
	}
}

// value calls run_python and returns the run's value as JSON text; an error
// result or a notice fails the test.
func value(t *testing.T, cs *mcp.ClientSession, args map[string]any) string {
	t.Helper()
	res := call(t, cs, args)
	sc := structured(t, res)
	if res.IsError || sc.Notice != "" {
		t.Fatalf("%v: IsError %v, %q", args, res.IsError, spinetest.Text(res))
	}
	return string(sc.Value)
}

// structured decodes a result's structuredContent (zero when there is none).
func structured(t *testing.T, res *mcp.CallToolResult) mcpserver.Result {
	t.Helper()
	var sc mcpserver.Result
	if res.StructuredContent == nil {
		return sc
	}
	data, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(data, &sc); err != nil {
		t.Fatalf("structuredContent %s: %v", data, err)
	}
	return sc
}

func source(src string) map[string]any { return map[string]any{"source": src} }

// TestSessionState: the calls of one client run in one session: what a
// program defines is there for the next, and a call made while another runs
// waits for it.
func TestSessionState(t *testing.T) {
	cs := spinetest.ConnectInMemory(t, mcpserver.New(runner, nil))
	value(t, cs, source("import math\nx = 20\ndef double(v):\n    return 2 * v"))
	if got := value(t, cs, source("double(x) + math.floor(2.5)")); got != "42" {
		t.Errorf("the second call: %s", got)
	}

	callAsync := func(src string) chan string {
		answer := make(chan string, 1)
		go func() {
			res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: mcpserver.ToolName, Arguments: source(src)})
			if err != nil {
				answer <- err.Error()
				return
			}
			answer <- spinetest.Text(res)
		}()
		return answer
	}
	first := callAsync("opened = gate()")
	<-gate.Entered
	second := callAsync("opened")
	gate.Let()
	if got := <-second; got != `{"value":"opened","stdout":""}` {
		t.Errorf("a call made while another ran: %s", got)
	}
	if got := <-first; got != `{"value":null,"stdout":""}` {
		t.Errorf("the call that ran first: %s", got)
	}
}

// TestSessionsApart: two clients, over streamable HTTP and in memory, do not
// see each other's state.
func TestSessionsApart(t *testing.T) {
	server := mcpserver.New(runner, nil)
	url := spinetest.ServeHTTP(t, spinetest.MCPHandler(server)).URL
	a, b := spinetest.ConnectHTTP(t, url), spinetest.ConnectHTTP(t, url)
	value(t, a, source("secret = 'a'"))
	if got := value(t, b, source("'secret' in globals()")); got != "false" {
		t.Errorf("b sees a's variable: %s", got)
	}
	value(t, b, source("secret = 'b'"))
	if got := value(t, a, source("secret")); got != `"a"` {
		t.Errorf("a's variable: %s", got)
	}
	if got := value(t, b, source("secret")); got != `"b"` {
		t.Errorf("b's variable: %s", got)
	}
	c := spinetest.ConnectInMemory(t, server)
	if got := value(t, c, source("'secret' in globals()")); got != "false" {
		t.Errorf("an in-memory client sees a variable: %s", got)
	}
}

// TestSessionFresh: fresh=true runs the program in a new, empty session,
// which later calls keep.
func TestSessionFresh(t *testing.T) {
	cs := spinetest.ConnectInMemory(t, mcpserver.New(runner, nil))
	tools, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	schema, _ := json.Marshal(tools.Tools[0].InputSchema)
	var props struct {
		Properties map[string]struct{ Type string }
	}
	json.Unmarshal(schema, &props)
	if props.Properties["fresh"].Type != "boolean" || !strings.Contains(tools.Tools[0].Description, "State persists from one call to the next") {
		t.Errorf("schema %s\ndescription:\n%s", schema, tools.Tools[0].Description)
	}
	value(t, cs, source("import json\nx = 1"))
	if got := value(t, cs, map[string]any{"source": "y = 2\n['x' in globals(), 'json' in globals()]", "fresh": true}); got != "[false,false]" {
		t.Errorf("fresh: %s", got)
	}
	if got := value(t, cs, map[string]any{"source": "['x' in globals(), y]", "fresh": false}); got != "[false,2]" {
		t.Errorf("after fresh: %s", got)
	}
}

// TestSessionLost: a call stopped in the middle of its program leaves the
// session unusable; the client's next call runs in a new session, and its
// result says the state was lost.
func TestSessionLost(t *testing.T) {
	cs := spinetest.ConnectInMemory(t, mcpserver.New(runner, &mcpserver.Options{Timeout: time.Hour}))
	value(t, cs, source("x = 1"))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		// A program that will not stop: its SIGINT handler swallows the
		// interrupt, so the run is stopped by force and the session lost.
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: mcpserver.ToolName, Arguments: source("import signal\nsignal.signal(signal.SIGINT, lambda *args: None)\ngate(wait=False)\nwhile True:\n    pass")})
		done <- err
	}()
	<-gate.Entered
	cancel() // the loop is stopped where it is
	if err := <-done; err == nil {
		t.Fatal("a cancelled call succeeded")
	}

	res := call(t, cs, source("'x' in globals()"))
	sc := structured(t, res)
	if res.IsError || string(sc.Value) != "false" || !strings.HasPrefix(sc.Notice, "The Python state of your earlier calls was lost: ") ||
		!strings.HasPrefix(spinetest.Text(res), `{"notice":"The Python state of your earlier calls was lost`) {
		t.Fatalf("after the loss: IsError %v, %q", res.IsError, spinetest.Text(res))
	}
	// The notice is given once.
	if got := value(t, cs, source("x = 2\nx")); got != "2" {
		t.Errorf("the new session: %s", got)
	}
}

// TestSessionTimeout: a call that runs past its time limit is interrupted
// (KeyboardInterrupt), which keeps the session: its answer is a time-out
// that does not say the state was lost. The loop never ends, so the time
// limit is certain to pass, however slow or fast the machine.
func TestSessionTimeout(t *testing.T) {
	cs := spinetest.ConnectInMemory(t, mcpserver.New(runner, &mcpserver.Options{Timeout: time.Millisecond}))
	res := call(t, cs, source("x = 1\nwhile True:\n    pass"))
	if text := spinetest.Text(res); !res.IsError || !strings.HasPrefix(text, "TimeoutError") || strings.Contains(text, "lost") || strings.Contains(text, "KeyboardInterrupt") {
		t.Fatalf("the time-out: IsError %v, %q", res.IsError, text)
	}
}

// TestMaxSessions: past MaxSessions, a new client's session takes the place
// of the one used least recently, whose client is told on its next call.
func TestMaxSessions(t *testing.T) {
	server := mcpserver.New(runner, &mcpserver.Options{MaxSessions: 1})
	a, b := spinetest.ConnectInMemory(t, server), spinetest.ConnectInMemory(t, server)
	value(t, a, source("x = 1"))
	value(t, b, source("y = 2")) // a's session is closed for b's
	res := call(t, a, source("x"))
	if text := spinetest.Text(res); !res.IsError || !strings.HasPrefix(text, "The Python state of your earlier calls was lost: the session was closed to make room") ||
		!strings.Contains(text, "NameError: name 'x' is not defined") {
		t.Fatalf("a after b: IsError %v, %q", res.IsError, text)
	}
	if sc := structured(t, call(t, b, source("'y' in globals()"))); string(sc.Value) != "false" || !strings.Contains(sc.Notice, "make room") {
		t.Errorf("b after a: %+v", sc)
	}
}

// TestSessionEnd: a client's session is closed when its MCP session ends.
func TestSessionEnd(t *testing.T) {
	r := spinetest.NewRunner(t, manifest, nil)
	cs := spinetest.ConnectInMemory(t, mcpserver.New(r, nil))
	value(t, cs, source("x = 1"))
	if n := r.SessionStats().Sessions; n != 1 {
		t.Fatalf("%d sessions, want 1", n)
	}
	cs.Close()
	spinetest.WaitFor(t, "the session to close", func() bool { return r.SessionStats().Sessions == 0 })
}

// TestStateless: with Options.Stateless, every call runs on a clean Guest,
// several at once, and the tool says so.
func TestStateless(t *testing.T) {
	server := mcpserver.New(runner, &mcpserver.Options{Stateless: true, Slots: 8})
	cs := spinetest.ConnectHTTP(t, spinetest.ServeHTTP(t, spinetest.MCPHandler(server)).URL)
	check(t, cs)
	tools, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	schema, _ := json.Marshal(tools.Tools[0].InputSchema)
	if strings.Contains(string(schema), "fresh") || !strings.Contains(tools.Tools[0].Description, "Nothing persists from one call to the next.") {
		t.Errorf("schema %s\ndescription:\n%s", schema, tools.Tools[0].Description)
	}
	value(t, cs, source("x = 1"))
	if got := value(t, cs, source("'x' in globals()")); got != "false" {
		t.Errorf("a variable persisted: %s", got)
	}

	// The calls run at once, each in its own Guest: all are in the gate
	// before it opens.
	answers := make(chan *mcp.CallToolResult, 4)
	for range 4 {
		go func() {
			res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: mcpserver.ToolName, Arguments: source("gate()")})
			if err != nil {
				t.Error(err)
			}
			answers <- res
		}()
	}
	for range 4 {
		<-gate.Entered
	}
	for range 4 {
		gate.Let()
		if res := <-answers; res == nil || res.IsError {
			t.Fatalf("a call: %+v", res)
		}
	}
}
