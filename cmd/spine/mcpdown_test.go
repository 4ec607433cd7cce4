package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/internal/spinetest"
)

// TestServeWithAServerDown: spine serve and spine mcp (openRunner) start
// when a configured MCP server (the SDK's streamable HTTP server on
// loopback) is down: /healthz's components show it down, its tools'
// calls raise a RuntimeError naming it, and once it is up it is connected
// in the background: the tools its "tools" names are called, with the
// server's schema checked; a server without "tools" says its tools come
// with the next start.
func TestServeWithAServerDown(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the Guest")
	}
	var down atomic.Bool
	down.Store(true)
	handler := spinetest.MCPHandler(spinetest.NewMCPServer(2))
	ts := spinetest.ServeHTTP(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
			return
		}
		handler.ServeHTTP(w, r)
	}))
	config := writeFile(t, "spine.json", `{"mcpServers": {
		"web": {"url": "`+ts.URL+`/mcp", "tools": ["add", "echo"]},
		"docs": {"url": "`+ts.URL+`/mcp"}
	}}`)
	t.Setenv("XDG_STATE_HOME", t.TempDir())
	var stderr strings.Builder
	runner, manifest, health, closeRunner, code := openRunner(t.Context(), config, false, &spine.Options{PoolSize: -1}, serverLogs{stderr: &stderr}, serverLog{name: "spine serve", w: &stderr}, true)
	if runner == nil {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	defer closeRunner()
	if got := toolNames(manifest); strings.Join(got, " ") != "web.add web.echo" {
		t.Fatalf("tools %v", got)
	}
	for _, name := range []string{"web", "docs"} {
		if h := health()[name]; !strings.HasPrefix(h, "mcp server "+name+" is down: connecting") || !strings.HasSuffix(h, "; reconnecting") {
			t.Fatalf("health of %s: %q", name, h)
		}
	}
	if !strings.Contains(stderr.String(), "mcp server down at start; connecting in the background") {
		t.Errorf("stderr: %s", stderr.String())
	}
	run := func(source string) string {
		t.Helper()
		out := spinetest.MustRun(t, runner, spine.Request{Source: source})
		var v any
		json.Unmarshal(out.Value, &v)
		if s, ok := v.(string); ok {
			return s
		}
		return string(out.Value)
	}
	const call = `
try:
    result = web.add(a=1, b=2)
except RuntimeError as err:
    result = str(err)`
	if v := run(call); !strings.HasPrefix(v, "mcp server web is down: connecting") {
		t.Fatalf("a call while down: %s", v)
	}

	down.Store(false)
	spinetest.WaitFor(t, "the servers to be connected", func() bool {
		h := health()
		return h["web"] == "" && strings.HasPrefix(h["docs"], "mcp server docs connected after spine started: its tools come with the next start")
	})
	if v := run(call); v != `{"sum":3}` {
		t.Fatalf("a call once up: %s", v)
	}
	if v := run(`web.echo(text="hi", times=2)`); v != "hihi" {
		t.Fatalf("echo: %s", v)
	}
	if v := run(`
try:
    web.add(a="one", b=2)
except TypeError as err:
    result = "TypeError: " + str(err)`); !strings.HasPrefix(v, "TypeError: ") {
		t.Fatalf("bad arguments: %s", v)
	}
}
