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
	for _, want := range []string{"def lookup(*, key: str)", "Look up the price of an item by key.", "```python", "RuntimeError", "inputs"} {
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
	check(t, spinetest.ConnectInMemory(t, mcpserver.New(runner, manifest, nil)))
}

func TestStreamableHTTP(t *testing.T) {
	server := mcpserver.New(runner, manifest, &mcpserver.Options{EarlyReads: true, Slots: 8})
	cs := spinetest.ConnectHTTP(t, spinetest.ServeHTTP(t, spinetest.MCPHandler(server)).URL)
	check(t, cs)

	// Clients run programs at once, each in its own Guest.
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
	cs := spinetest.ConnectInMemory(t, mcpserver.New(runner, manifest, &mcpserver.Options{Timeout: 2 * time.Second}))
	res := call(t, cs, map[string]any{"source": "print('spinning')\nwhile True:\n    pass"})
	if !res.IsError || !strings.HasPrefix(spinetest.Text(res), "TimeoutError: the program did not finish within its time limit of 2s") ||
		!strings.Contains(spinetest.Text(res), "stdout:\nspinning") {
		t.Errorf("IsError %v, %q", res.IsError, spinetest.Text(res))
	}
}

func TestDescription(t *testing.T) {
	empty := mcpserver.Description(nil, time.Minute)
	if !strings.Contains(empty, "No tools are available") || strings.Contains(empty, "```") || !strings.Contains(empty, "stopped after 1m0s") {
		t.Errorf("no tools:\n%s", empty)
	}
	full := mcpserver.Description(manifest, time.Minute)
	if !strings.Contains(full, strings.TrimRight(spine.Stubs(manifest), "\n")) {
		t.Errorf("the description lacks the stubs:\n%s", full)
	}
}

func TestClientCancel(t *testing.T) {
	cs := spinetest.ConnectInMemory(t, mcpserver.New(runner, manifest, &mcpserver.Options{Timeout: time.Hour}))
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
func TestSlots(t *testing.T) {
	server := mcpserver.New(runner, manifest, &mcpserver.Options{Slots: 2})
	cs := spinetest.ConnectHTTP(t, spinetest.ServeHTTP(t, spinetest.MCPHandler(server)).URL)

	answers := make(chan *mcp.CallToolResult, 2)
	for range 2 {
		go func() {
			res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: mcpserver.ToolName, Arguments: map[string]any{"source": "gate()"}})
			if err != nil {
				t.Error(err)
			}
			answers <- res
		}()
		<-gate.Entered // the call holds a slot: its program is in the tool
	}
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
