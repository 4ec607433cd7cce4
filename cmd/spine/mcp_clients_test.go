package main

import (
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/spine-run/spine/internal/spinetest"
)

// TestMCPClientCannotEvictOthers: over HTTP, one client (one address)
// opening more MCP sessions than the server keeps closes its own sessions,
// never another client's: the other's state is there for its next call,
// with a cap per client or without.
func TestMCPClientCannotEvictOthers(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the spine command")
	}
	bin := buildSpine(t)
	for _, perClient := range []string{"0", "3"} {
		t.Run("sessions-per-client="+perClient, func(t *testing.T) {
			mcpClients(t, bin, perClient)
		})
	}
}

// mcpClients is TestMCPClientCannotEvictOthers with --sessions-per-client
// perClient.
func mcpClients(t *testing.T, bin, perClient string) {
	_, addr := start(t, bin, "mcp", "--http", "127.0.0.1:0", "--demo-tools", "--max-sessions", "4", "--sessions-per-client", perClient)
	endpoint := "http://" + addr + "/mcp"
	call := func(cs *mcp.ClientSession, source string) string {
		t.Helper()
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "run_python", Arguments: map[string]any{"source": source}})
		if err != nil {
			t.Fatal(err)
		}
		return spinetest.Text(res)
	}
	mine := spinetest.ConnectHTTP(t, endpoint) // from 127.0.0.1
	if got := call(mine, "x = 'mine'"); got != `{"value":null,"stdout":""}` {
		t.Fatal(got)
	}

	// The other client comes from 127.0.0.2, and opens ten sessions.
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
	other := &http.Client{Transport: &http.Transport{DialContext: dialer.DialContext}}
	for i := range 10 {
		cs, err := spinetest.NewMCPClient().Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: other}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		if got := call(cs, "y = 1"); strings.Contains(got, "busy") {
			t.Fatalf("the other client's session %d: %s", i, got)
		}
	}
	got := call(mine, "x")
	if !strings.HasPrefix(got, `{"value":"mine"`) || strings.Contains(got, "lost") {
		t.Fatalf("my state after another client opened ten sessions: %s", got)
	}
}
