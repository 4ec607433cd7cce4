package main

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/spine-run/spine/internal/spinetest"
)

// mcpValue runs source through cs and wants its result's text to begin with
// want's value.
func mcpValue(t *testing.T, cs *mcp.ClientSession, source, want string) {
	t.Helper()
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "run_python", Arguments: map[string]any{"source": source}})
	if err != nil {
		t.Fatalf("%q: %v", source, err)
	}
	if got := spinetest.Text(res); res.IsError || !strings.HasPrefix(got, `{"value":`+want+`,`) {
		t.Fatalf("%q: %s; want the value %s", source, got, want)
	}
}

// TestMCPStoreTwoProcesses runs two spine mcp --http processes on one
// file:// store with a tokens file of two tokens: one client's MCP session
// is served by both, its Python state carried from one to the other and
// back; a client without a token, or with the other token, has no part of
// it on either process.
func TestMCPStoreTwoProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the spine command")
	}
	bin := buildSpine(t)
	const token, other = "mcp-store-token-alice", "mcp-store-token-bob"
	tokens := filepath.Join(t.TempDir(), "tokens.json")
	file := `{"tokens": [{"name": "alice", "token": "` + token + `"}, {"name": "bob", "token": "` + other + `"}]}`
	if err := os.WriteFile(tokens, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"mcp", "--http", "127.0.0.1:0", "--demo-tools", "--tokens-file", tokens, "--session-store", "file://" + t.TempDir()}
	a, addrA := start(t, bin, args...)
	b, addrB := start(t, bin, args...)
	urlA, urlB := "http://"+addrA, "http://"+addrB

	route := spinetest.NewRouter(t, urlA, token, "")
	cs := route.Connect(t)
	mcpValue(t, cs, "x = ['a']", "null")
	route.To(t, urlB)
	mcpValue(t, cs, "x.append('b')\nx", `["a","b"]`)
	route.To(t, urlA)
	mcpValue(t, cs, "x.append('a')\nx", `["a","b","a"]`)

	// With the other token, the session's id opens nothing on either
	// process (a itself holds it live; b would load it).
	for _, to := range []string{urlA, urlB} {
		thief := spinetest.NewRouter(t, to, other, cs.ID()).Connect(t)
		res, err := thief.CallTool(t.Context(), &mcp.CallToolParams{Name: "run_python", Arguments: map[string]any{"source": "x = 'stolen'\nx"}})
		if err == nil {
			t.Errorf("the other token's call through %s: %s", to, spinetest.Text(res))
		}
	}
	// Without a token, or with an unknown one, nothing at all.
	for _, bad := range []string{"", "an-unknown-token-0000"} {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, urlB+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"run_python","arguments":{"source":"x"}}}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Session-Id", cs.ID())
		if bad != "" {
			req.Header.Set("Authorization", "Bearer "+bad)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("token %q: status %d", bad, resp.StatusCode)
		}
	}
	route.To(t, urlB)
	mcpValue(t, cs, "x", `["a","b","a"]`)
	a.stop(t)
	b.stop(t)
}

// TestMCPStoreDrain: with --session-write hibernate nothing is written per
// call; SIGTERM writes every session, and another process serves them.
func TestMCPStoreDrain(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the spine command")
	}
	bin := buildSpine(t)
	dir := t.TempDir()
	args := []string{"mcp", "--http", "127.0.0.1:0", "--demo-tools", "--session-store", "file://" + dir, "--session-write", "hibernate"}
	a, addrA := start(t, bin, args...)
	b, addrB := start(t, bin, args...)
	route := spinetest.NewRouter(t, "http://"+addrA, "", "")
	first, second := route.Connect(t), route.Connect(t)
	mcpValue(t, first, "n = 1", "null")
	mcpValue(t, second, "n = 2", "null")
	if entries, err := os.ReadDir(dir); err != nil || len(entries) != 0 {
		t.Fatalf("the store before SIGTERM: %v %v", entries, err)
	}
	a.stop(t)
	route.To(t, "http://"+addrB)
	mcpValue(t, first, "n", "1")
	mcpValue(t, second, "n", "2")
	b.stop(t)
}
