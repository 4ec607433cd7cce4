package spine

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
)

// TestToolDiscovery: a program finds its tools with tools.search and reads
// one's stub with tools.describe, both answered on the Host from the run's
// tools (the Runner's and the run's own); neither is a tool call.
func TestToolDiscovery(t *testing.T) {
	m := testManifest()
	m["crm.find_customer"] = ToolSpec{Call: lookupTool, Description: "Find a customer by email.\nReturns the record.",
		InputSchema: json.RawMessage(`{"type": "object", "properties": {"email": {"type": "string"}}, "required": ["email"]}`)}
	r := newRunner(t, m, nil)
	var calls atomic.Int32
	out, err := r.Run(context.Background(), Request{
		Source: `found = tools.search("customer email")
everything = [t["name"] for t in tools.search(limit=100)]
stub = tools.describe("crm.find_customer")
same = tools.describe(crm.find_customer) == stub
mine = tools.search("question")
[found, everything, "def find_customer(email: str)" in stub, same, mine]`,
		Tools: Manifest{"ask": askTool(&calls)},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := `[[{"name":"crm.find_customer","description":"Find a customer by email."}],["ask","crm.find_customer","echo","fail","lookup"],true,true,[{"name":"ask","description":"Ask a question."}]]`
	if string(out.Value) != want {
		t.Errorf("value\n%s\nwant\n%s", out.Value, want)
	}
	if out.ToolCalls != 0 || len(out.Calls) != 0 || calls.Load() != 0 {
		t.Errorf("discovery counted as tool calls: %d %v", out.ToolCalls, out.Calls)
	}
	for src, msg := range map[string]string{
		`tools.describe("nosuch")`:           `no tool is named "nosuch"`,
		`tools.describe("__tools__.search")`: `no tool is named`,
		`tools.search(limit=0)`:              "limit must be at least 1",
		`tools.search(5)`:                    "query must be a str",
		`tools.describe(print)`:              "takes a tool's name",
	} {
		_, err := r.Run(context.Background(), Request{Source: src})
		var pyErr *PythonError
		if !errors.As(err, &pyErr) || !strings.Contains(pyErr.Message, msg) {
			t.Errorf("%s: %v, want %q", src, err, msg)
		}
	}
	// A global of the program's named tools hides the builtin, as any does.
	if got := string(mustRunWhite(t, r, "tools = [1, 2]\nlen(tools)").Value); got != "2" {
		t.Errorf("a program's own tools: %s", got)
	}
}

// TestToolDiscoveryShadowed: a Runner whose tools have the namespace tools
// keeps it: the builtin is hidden.
func TestToolDiscoveryShadowed(t *testing.T) {
	r := newRunner(t, Manifest{"tools.search": testManifest()["echo"]}, nil)
	if got := string(mustRunWhite(t, r, `tools.search(q="x")["q"]`).Value); got != `"x"` {
		t.Errorf("the Runner's tools.search: %s", got)
	}
}

// TestToolDiscoveryBounded: a run's discovery calls are capped.
func TestToolDiscoveryBounded(t *testing.T) {
	r := newRunner(t, testManifest(), nil)
	_, err := r.Run(context.Background(), Request{Source: "for i in range(2000):\n    tools.search('x')"})
	var pyErr *PythonError
	if !errors.As(err, &pyErr) || !strings.Contains(pyErr.Message, "calls are used up") {
		t.Errorf("2000 searches: %v", err)
	}
}

func mustRunWhite(t *testing.T, r *Runner, src string) *Output {
	t.Helper()
	out, err := r.Run(context.Background(), Request{Source: src})
	if err != nil {
		t.Fatalf("%q: %v", src, err)
	}
	return out
}
