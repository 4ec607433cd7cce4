package mcpserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/internal/spinetest"
	"github.com/spine-run/spine/mcpserver"
)

// askingServer is an MCP server whose Runner defers every call of price to
// a person, with one run slot; priced counts the calls that reached the
// tool.
func askingServer(t *testing.T, priced *atomic.Int32) *mcp.Server {
	t.Helper()
	m := spine.Manifest{"price": {Call: func(ctx context.Context, args json.RawMessage) (any, error) {
		priced.Add(1)
		return 21, nil
	}}}
	r := spinetest.NewRunner(t, m, &spine.Options{PoolSize: -1, Approve: func(ctx context.Context, tool string, args json.RawMessage, early bool) error {
		if tool == "price" {
			return fmt.Errorf("prices are secret: %w", spine.ErrAsk)
		}
		return nil
	}})
	return mcpserver.New(r, &mcpserver.Options{Slots: 1})
}

// connect connects a client with opts to server, over streamable HTTP at
// url or, when url is "", over in-memory transports, asking for version
// ("": the newest).
func connect(t *testing.T, server *mcp.Server, url string, opts *mcp.ClientOptions, version string) *mcp.ClientSession {
	t.Helper()
	var transport mcp.Transport = &mcp.StreamableClientTransport{Endpoint: url}
	if url == "" {
		serverEnd, clientEnd := mcp.NewInMemoryTransports()
		ss, err := server.Connect(t.Context(), serverEnd, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ss.Close() })
		transport = clientEnd
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "spine-test", Version: "v0"}, opts)
	cs, err := c.Connect(t.Context(), transport, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

const askSource = "try:\n    result = price(item='book')\nexcept PermissionError as e:\n    result = 'refused: ' + str(e)"

// TestApprovalElicits: a call Approve defers is asked of the client's user
// through elicitation — during the call over streamable HTTP on
// 2025-11-25, by input requests and a retried call in memory on
// 2026-07-28 — the tool not called until the answer comes and the run's
// slot free meanwhile; allowed, the tool runs; refused, the program gets
// PermissionError with the user's reason.
func TestApprovalElicits(t *testing.T) {
	for _, version := range []string{"2025-11-25", "2026-07-28"} {
		t.Run(version, func(t *testing.T) { testElicits(t, version) })
	}
}

func testElicits(t *testing.T, version string) {
	var priced atomic.Int32
	server := askingServer(t, &priced)
	url := spinetest.ServeHTTP(t, spinetest.MCPHandler(server)).URL
	asked, answer := make(chan *mcp.ElicitParams), make(chan *mcp.ElicitResult)
	at := url
	if version >= "2026-07-28" {
		at = "" // in memory: streamable HTTP speaks 2025-11-25
	}
	cs := connect(t, server, at, &mcp.ClientOptions{ElicitationHandler: func(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		asked <- req.Params
		return <-answer, nil
	}}, version)
	if v := cs.InitializeResult().ProtocolVersion; v != version {
		t.Fatalf("the client speaks %s", v)
	}
	other := connect(t, server, url, nil, "")
	for _, c := range []struct {
		name   string
		answer *mcp.ElicitResult
		want   string
		priced int32
	}{
		{"allowed", &mcp.ElicitResult{Action: "accept", Content: map[string]any{"allow": true}}, `{"value":21,"stdout":""}`, 1},
		{"refused", &mcp.ElicitResult{Action: "accept", Content: map[string]any{"allow": false, "reason": "not today"}}, `{"value":"refused: not today","stdout":""}`, 0},
		{"declined", &mcp.ElicitResult{Action: "decline"}, `{"value":"refused: the user declined the call","stdout":""}`, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			priced.Store(0)
			done := make(chan *mcp.CallToolResult, 1)
			go func() {
				res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: mcpserver.ToolName, Arguments: map[string]any{"source": askSource}})
				if err != nil {
					t.Error(err)
				}
				done <- res
			}()
			q := <-asked
			if !strings.Contains(q.Message, `price with {"item":"book"}. prices are secret: the call needs a person's approval. Allow it?`) || q.RequestedSchema == nil {
				t.Errorf("asked %q (schema %v)", q.Message, q.RequestedSchema)
			}
			// The one slot is free while the user decides.
			if res := call(t, other, map[string]any{"source": "1 + 1"}); res.IsError || spinetest.Text(res) != `{"value":2,"stdout":""}` {
				t.Errorf("a call while one waits: %s", spinetest.Text(res))
			}
			if n := priced.Load(); n != 0 {
				t.Errorf("the tool ran %d times before the answer", n)
			}
			answer <- c.answer
			res := <-done
			if res == nil || res.IsError || spinetest.Text(res) != c.want || priced.Load() != c.priced {
				t.Fatalf("result %+v (tool calls %d), want %s", res, priced.Load(), c.want)
			}
		})
	}
}

// TestApprovalCannotAsk: a client that declares no elicitation has the
// call refused, the program told why; the tool is not called.
func TestApprovalCannotAsk(t *testing.T) {
	var priced atomic.Int32
	server := askingServer(t, &priced)
	url := spinetest.ServeHTTP(t, spinetest.MCPHandler(server)).URL
	for _, c := range []struct {
		name    string
		url     string
		opts    *mcp.ClientOptions
		version string
		want    string
	}{
		{"over HTTP", url, nil, "2025-11-25", "this MCP client cannot ask its user (it declares no elicitation capability)"},
		{"in memory", "", nil, "2026-07-28", "this MCP client cannot ask its user (it declares no elicitation capability)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cs := connect(t, server, c.url, c.opts, c.version)
			if v := cs.InitializeResult().ProtocolVersion; v != c.version {
				t.Fatalf("the client speaks %s, not %s", v, c.version)
			}
			res := call(t, cs, map[string]any{"source": askSource})
			text := spinetest.Text(res)
			if res.IsError || !strings.Contains(text, "refused: tool call refused: prices are secret: the call needs a person's approval, and ") ||
				!strings.Contains(text, c.want) || priced.Load() != 0 {
				t.Fatalf("result %s (tool calls %d), want a refusal saying %q", text, priced.Load(), c.want)
			}
		})
	}
}

// TestApprovalRequestState: on 2026-07-28 the question is the call's
// result (input requests and a request state), and the run goes on only
// with a retried call carrying that state, once, to its next question or
// its end; another state is told the run is no more, and an answer without
// a boolean "allow" refuses.
func TestApprovalRequestState(t *testing.T) {
	var priced atomic.Int32
	server := askingServer(t, &priced)
	cs := connect(t, server, "", &mcp.ClientOptions{MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: true},
		ElicitationHandler: func(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			t.Error("asked during the call")
			return nil, fmt.Errorf("not here")
		}}, "2026-07-28")
	args := map[string]any{"source": "print('a')\n" + askSource + "\ntry:\n    price(item='pen')\nexcept PermissionError as e:\n    result = [result, str(e)]"}
	res := call(t, cs, args)
	q, ok := res.InputRequests["approval"].(*mcp.ElicitParams)
	if !res.NeedsInput() || !ok || res.RequestState == "" || !strings.Contains(q.Message, "call price with") || priced.Load() != 0 {
		t.Fatalf("result %+v, want a question", res)
	}
	allow := map[string]any{"allow": true}
	retry := func(state string, content map[string]any) *mcp.CallToolResult {
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: mcpserver.ToolName, Arguments: args, RequestState: state,
			InputResponses: mcp.InputResponseMap{"approval": &mcp.ElicitResult{Action: "accept", Content: content}}})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := retry("nonsense", allow); !res.IsError || !strings.Contains(spinetest.Text(res), "the run this call continues is no more") {
		t.Fatalf("a made-up state: %+v", res)
	}
	first := res.RequestState
	res = retry(first, allow)
	if q, ok := res.InputRequests["approval"].(*mcp.ElicitParams); !ok || res.RequestState == "" || res.RequestState == first ||
		!strings.Contains(q.Message, `{"item":"pen"}`) || priced.Load() != 1 {
		t.Fatalf("the retried call: %+v, want the next question", res)
	}
	want := `{"value":[21,"the user's answer has no boolean \"allow\": the call is refused"],"stdout":"a\n"}`
	if res := retry(res.RequestState, map[string]any{"reason": "?"}); res.IsError || spinetest.Text(res) != want || priced.Load() != 1 {
		t.Fatalf("the end: %s", spinetest.Text(res))
	}
	if res := retry(first, allow); !res.IsError || priced.Load() != 1 {
		t.Fatalf("a state used twice: %s", spinetest.Text(res))
	}
}

// TestApprovalWaitingBound: runs wait for their users' answers without
// their slots only as many at once as there are slots; past that a
// deferred call is refused without asking, so that a client starting runs
// that ask and never answer cannot hold Guests without bound.
func TestApprovalWaitingBound(t *testing.T) {
	var priced atomic.Int32
	m := spine.Manifest{"price": {Call: func(ctx context.Context, args json.RawMessage) (any, error) {
		priced.Add(1)
		return 21, nil
	}}}
	r := spinetest.NewRunner(t, m, &spine.Options{PoolSize: -1, Approve: func(ctx context.Context, tool string, args json.RawMessage, early bool) error {
		if tool == "price" {
			return fmt.Errorf("prices are secret: %w", spine.ErrAsk)
		}
		return nil
	}})
	server := mcpserver.New(r, &mcpserver.Options{Slots: 1, Stateless: true})
	cs := connect(t, server, "", &mcp.ClientOptions{MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: true},
		ElicitationHandler: func(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return nil, fmt.Errorf("not here")
		}}, "2026-07-28")
	args := map[string]any{"source": askSource}
	res := call(t, cs, args)
	if !res.NeedsInput() || res.RequestState == "" {
		t.Fatalf("%+v, want a question", res)
	}
	state := res.RequestState
	res = call(t, cs, args)
	if res.IsError || !strings.Contains(spinetest.Text(res), "refused: tool call refused: prices are secret: the call needs a person's approval, and 1 runs already wait") {
		t.Errorf("a second run asking while one waits, with one slot: %+v %s, want a refusal", res, spinetest.Text(res))
	}
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: mcpserver.ToolName, Arguments: args, RequestState: state,
		InputResponses: mcp.InputResponseMap{"approval": &mcp.ElicitResult{Action: "accept", Content: map[string]any{"allow": true}}}})
	if err != nil || res.IsError || spinetest.Text(res) != `{"value":21,"stdout":""}` {
		t.Fatalf("the answer: %v %s", err, spinetest.Text(res))
	}
	// Its place is free again.
	if res = call(t, cs, args); !res.NeedsInput() {
		t.Fatalf("a run asking after: %+v %s, want a question", res, spinetest.Text(res))
	}
	if _, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: mcpserver.ToolName, Arguments: args, RequestState: res.RequestState,
		InputResponses: mcp.InputResponseMap{"approval": &mcp.ElicitResult{Action: "decline"}}}); err != nil {
		t.Fatal(err)
	}
}

// TestApprovalLongArguments: a question whose arguments are too long to
// show whole says how much of them it leaves out, so that a program cannot
// put what matters past the cut, behind what looks like padding.
func TestApprovalLongArguments(t *testing.T) {
	var priced atomic.Int32
	server := askingServer(t, &priced)
	cs := connect(t, server, "", &mcp.ClientOptions{MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: true},
		ElicitationHandler: func(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return nil, fmt.Errorf("not here")
		}}, "2026-07-28")
	args := map[string]any{"source": "price(item='book', note=' ' * 3000, ship_to='elsewhere')"}
	res := call(t, cs, args)
	q, ok := res.InputRequests["approval"].(*mcp.ElicitParams)
	if !ok {
		t.Fatalf("%+v, want a question", res)
	}
	if strings.Contains(q.Message, "elsewhere") || !strings.Contains(q.Message, "only the first 2000 of the arguments' 3047 bytes are shown: 1047 are not") {
		t.Errorf("asked %q", q.Message)
	}
	if _, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: mcpserver.ToolName, Arguments: args, RequestState: res.RequestState,
		InputResponses: mcp.InputResponseMap{"approval": &mcp.ElicitResult{Action: "decline"}}}); err != nil {
		t.Fatal(err)
	}
}
