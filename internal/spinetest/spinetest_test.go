package spinetest

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"sort"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func TestLookup(t *testing.T) {
	tools := NewTools()
	lookup := tools.Manifest()["lookup"]
	if !lookup.AllowEarlyRead || lookup.Description != LookupDescription {
		t.Fatalf("lookup spec %+v", lookup)
	}
	if v, err := lookup.Call(t.Context(), json.RawMessage(`{"key": "book"}`)); err != nil || v != 21 {
		t.Fatalf("book: %v %v", v, err)
	}
	if _, err := lookup.Call(t.Context(), json.RawMessage(`{"key": "unicorn"}`)); err == nil || err.Error() != `no such key: "unicorn"` {
		t.Fatalf("unicorn: %v", err)
	}
	if a, b := <-tools.Lookups, <-tools.Lookups; a != "book" || b != "unicorn" {
		t.Fatalf("lookups %q %q", a, b)
	}
	lookup.Call(t.Context(), json.RawMessage(`{"key": "pen"}`))
	tools.DrainLookups()
	if len(tools.Lookups) != 0 {
		t.Fatal("not drained")
	}
}

func TestGate(t *testing.T) {
	g := NewGate()
	call := g.Tool().Call
	type answer struct {
		v   any
		err error
	}
	answers := make(chan answer, 2)
	for range 2 {
		go func() {
			v, err := call(t.Context(), json.RawMessage(`{}`))
			answers <- answer{v, err}
		}()
		<-g.Entered
	}
	g.Let()
	if a := <-answers; a.v != "opened" || a.err != nil {
		t.Fatalf("let through: %+v", a)
	}
	g.Open()
	if a := <-answers; a.v != "opened" || a.err != nil {
		t.Fatalf("opened: %+v", a)
	}
	g.Open() // twice is fine
	if v, err := call(t.Context(), nil); v != "opened" || err != nil {
		t.Fatalf("after Open: %v %v", v, err)
	}
	<-g.Entered

	closed := NewGate()
	if v, err := closed.Tool().Call(t.Context(), json.RawMessage(`{"wait": false}`)); v != "passed" || err != nil {
		t.Fatalf("wait=False: %v %v", v, err)
	}
	<-closed.Entered
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := closed.Tool().Call(ctx, json.RawMessage(`{}`)); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
}

func TestMCPServer(t *testing.T) {
	cs := ConnectInMemory(t, NewMCPServer(3))
	var names []string
	for tool, err := range cs.Tools(t.Context(), nil) {
		if err != nil {
			t.Fatal(err)
		}
		if a := tool.Annotations; a == nil || !a.ReadOnlyHint {
			t.Errorf("%s: annotations %+v", tool.Name, a)
		}
		names = append(names, tool.Name)
	}
	sort.Strings(names)
	if want := []string{"add", "echo", "fail", "get-issue", "getenv", "lines", "picture", "slow"}; !reflect.DeepEqual(names, want) {
		t.Fatalf("tools %v", names)
	}
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "ab", "times": 2}})
	if err != nil || res.IsError || Text(res) != "abab" {
		t.Fatalf("echo: %v %+v", err, res)
	}
	res, err = cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "fail", Arguments: map[string]any{"reason": "test"}})
	if err != nil || !res.IsError || Text(res) != "failed on purpose: test" {
		t.Fatalf("fail: %v %+v", err, res)
	}
}

func TestParseMetrics(t *testing.T) {
	got := ParseMetrics(t, []byte("# HELP x\n# TYPE x counter\nx 3\ny{kind=\"a b\"} 1.5e+06\n\n"))
	if want := map[string]float64{"x": 3, `y{kind="a b"}`: 1.5e6}; !reflect.DeepEqual(got, want) {
		t.Fatalf("%v", got)
	}
}
