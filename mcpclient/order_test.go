package mcpclient_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spine-run/spine"
	"github.com/spine-run/spine/mcpclient"
)

// orderServer is an MCP server whose tools' schemas list their properties
// out of alphabetical order, and whose goto answers with structured content
// in the same kind of order; it keeps the arguments each call got.
type orderServer struct {
	mu   sync.Mutex
	args []string
}

func (o *orderServer) take() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	got := o.args
	o.args = nil
	return got
}

// connect serves a new server in memory and returns the client's end.
func (o *orderServer) connect(t *testing.T) mcp.Transport {
	t.Helper()
	server := mcp.NewServer(&mcp.Implementation{Name: "order", Version: "v1"}, nil)
	server.AddTool(&mcp.Tool{
		Name:         "goto",
		Description:  "Go to a place.",
		InputSchema:  json.RawMessage(`{"type":"object","properties":{"location":{"type":"string"},"speed":{"type":"integer","minimum":0},"agent":{"type":"string"}},"required":["location"]}`),
		OutputSchema: json.RawMessage(`{"type":"object","properties":{"where":{"type":"string"},"eta":{"type":"integer"},"args":{"type":"string"}},"required":["where","eta","args"]}`),
	}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		args := string(req.Params.Arguments)
		o.mu.Lock()
		o.args = append(o.args, args)
		o.mu.Unlock()
		structured, _ := json.Marshal(args)
		return &mcp.CallToolResult{
			Content:           []mcp.Content{&mcp.TextContent{Text: "ok"}},
			StructuredContent: json.RawMessage(`{"where":"there","eta":3,"args":` + string(structured) + `}`),
		}, nil
	})
	server.AddTool(&mcp.Tool{Name: "look", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "seen"}}}, nil
		})
	clientEnd, serverEnd := mcp.NewInMemoryTransports()
	ss, err := server.Connect(t.Context(), serverEnd, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	return clientEnd
}

func orderRunner(t *testing.T, m spine.Manifest) *spine.Runner {
	t.Helper()
	r, err := spine.New(context.Background(), m, &spine.Options{PoolSize: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(context.Background()) })
	return r
}

// TestServerOrder: an MCP tool's parameters are in the order the server
// wrote its input schema's properties, in the stub and for positional
// arguments, and its structured results keep the server's key order.
func TestServerOrder(t *testing.T) {
	o := &orderServer{}
	m, session, err := mcpclient.Connect(t.Context(), o.connect(t), "srv", &mcpclient.Options{ExcludeTools: []string{"look"}})
	if err != nil {
		t.Fatal(err)
	}
	defer session.Close()
	stubs := spine.Stubs(m)
	for _, want := range []string{
		"class GotoResult(TypedDict):\n    where: str\n    eta: int\n    args: str\n",
		"def goto(location: str, speed: int | None = None, agent: str | None = None) -> GotoResult:",
	} {
		if !strings.Contains(stubs, want) {
			t.Errorf("stubs lack %q:\n%s", want, stubs)
		}
	}
	r := orderRunner(t, m)
	for _, c := range []struct{ source, sent string }{
		{`r = srv.goto("kitchen", 3)`, `{"location":"kitchen","speed":3}`},
		{`r = srv.goto(location="kitchen", speed=3)`, `{"location":"kitchen","speed":3}`},
		{`r = srv.goto("kitchen", 3, "bob")`, `{"location":"kitchen","speed":3,"agent":"bob"}`},
		// None for an optional parameter is not sent.
		{`r = srv.goto("kitchen", speed=None, agent=None)`, `{"location":"kitchen"}`},
	} {
		out, err := r.Run(t.Context(), spine.Request{Source: c.source + "\n[list(r), r['args']]"})
		if err != nil {
			t.Fatalf("%s: %v", c.source, err)
		}
		want, _ := json.Marshal([]any{[]string{"where", "eta", "args"}, c.sent})
		if string(out.Value) != string(want) {
			t.Errorf("%s: %s, want %s", c.source, out.Value, want)
		}
		if got := o.take(); len(got) != 1 || got[0] != c.sent {
			t.Errorf("%s: the server got %q, want %s", c.source, got, c.sent)
		}
	}
	// Mistakes are the TypeError a Go tool raises, before the server is
	// called; a tool left out is named with the tools there are.
	for _, c := range []struct{ source, kind, want string }{
		{`srv.goto("kitchen", "fast")`, "TypeError", "srv.goto() argument 'speed' must be int, not str"},
		{`srv.goto("kitchen", -1)`, "TypeError", "srv.goto() argument 'speed' must be >= 0, not -1"},
		{`srv.goto("kitchen", src="x")`, "TypeError", "srv.goto() got an unexpected keyword argument 'src'"},
		{`srv.look()`, "AttributeError", "module 'srv' has no tool 'look'; its tools are: goto"},
	} {
		_, err := r.Run(t.Context(), spine.Request{Source: c.source})
		var pyErr *spine.PythonError
		if !errors.As(err, &pyErr) || pyErr.Type != c.kind || pyErr.Message != c.want {
			t.Errorf("%s: %v, want %s: %s", c.source, err, c.kind, c.want)
		}
	}
	// The Host's own check, for a caller that is no Python program.
	_, err = m["srv.goto"].Call(t.Context(), json.RawMessage(`{"location":"k","speed":"fast"}`))
	var argErr *spine.ArgumentError
	if !errors.As(err, &argErr) || argErr.Message != "argument 'speed' must be int, not str" {
		t.Errorf("the Host's check: %v", err)
	}
	if got := o.take(); len(got) != 0 {
		t.Errorf("the server was called with %q", got)
	}
}

// TestToolsWithoutOrder: Tools, on a session the caller made, sees only the
// SDK's decoded schemas, whose order is lost: the tools are keyword-only,
// and a positional call says why.
func TestToolsWithoutOrder(t *testing.T) {
	o := &orderServer{}
	session, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "v1"}, nil).Connect(t.Context(), o.connect(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer session.Close()
	m, err := mcpclient.Tools(t.Context(), session, "srv", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !m["srv.goto"].KeywordOnly || !strings.Contains(spine.Stub("srv.goto", m["srv.goto"]), "def goto(*, location: str") {
		t.Errorf("keyword-only %v, stub\n%s", m["srv.goto"].KeywordOnly, spine.Stub("srv.goto", m["srv.goto"]))
	}
	r := orderRunner(t, m)
	_, err = r.Run(t.Context(), spine.Request{Source: `srv.goto("kitchen")`})
	var pyErr *spine.PythonError
	want := "srv.goto() takes keyword arguments only, as the order of its parameters is not known (1 positional argument given)"
	if !errors.As(err, &pyErr) || pyErr.Type != "TypeError" || pyErr.Message != want {
		t.Errorf("%v, want TypeError: %s", err, want)
	}
	out, err := r.Run(t.Context(), spine.Request{Source: `srv.goto(location="kitchen")["where"]`})
	if err != nil || string(out.Value) != `"there"` {
		t.Errorf("by keyword: %v %v", out, err)
	}
}
