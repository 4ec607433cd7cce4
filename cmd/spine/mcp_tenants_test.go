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

// TestMCPTokensFile: spine mcp --http takes spine serve's tokens file. A
// request needs one of its tokens; each token is a client of its own, so
// a token past its "sessions" closes its own sessions and never another
// token's, even from the same address.
func TestMCPTokensFile(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the spine command")
	}
	bin := buildSpine(t)
	file := filepath.Join(t.TempDir(), "tokens.json")
	const alice, bob = "alice-secret-0123456789", "bob-secret-0123456789"
	err := os.WriteFile(file, []byte(`{"tokens": [
  {"name": "alice", "token": "`+alice+`", "sessions": 2},
  {"name": "bob", "token": "`+bob+`"}
]}`), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	_, addr := start(t, bin, "mcp", "--http", "127.0.0.1:0", "--demo-tools", "--max-sessions", "10", "--tokens-file", file)
	endpoint := "http://" + addr + "/mcp"
	connect := func(token string) (*mcp.ClientSession, error) {
		client := &http.Client{Transport: bearer{token}}
		cs, err := spinetest.NewMCPClient().Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: client}, nil)
		if err == nil {
			t.Cleanup(func() { cs.Close() })
		}
		return cs, err
	}
	call := func(cs *mcp.ClientSession, source string) string {
		t.Helper()
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "run_python", Arguments: map[string]any{"source": source}})
		if err != nil {
			t.Fatal(err)
		}
		return spinetest.Text(res)
	}

	if _, err := connect("not-a-token-of-the-file"); err == nil {
		t.Fatal("a token outside the file connected")
	}
	mine, err := connect(bob)
	if err != nil {
		t.Fatal(err)
	}
	call(mine, "x = 'bob'")
	var alices []*mcp.ClientSession
	for i := range 3 {
		cs, err := connect(alice)
		if err != nil {
			t.Fatal(err)
		}
		call(cs, "y = "+string(rune('0'+i)))
		alices = append(alices, cs)
	}
	// Alice's third session closed her first, the one she used least
	// recently; bob's is there.
	if got := call(alices[0], "y"); !strings.Contains(got, "lost") && !strings.Contains(got, "closed") {
		t.Errorf("alice's first session after her third: %s", got)
	}
	if got := call(alices[2], "y"); !strings.HasPrefix(got, `{"value":2`) {
		t.Errorf("alice's third session: %s", got)
	}
	if got := call(mine, "x"); !strings.HasPrefix(got, `{"value":"bob"`) || strings.Contains(got, "lost") {
		t.Errorf("bob's session after alice opened three: %s", got)
	}
}
