package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/spine-run/spine/door"
	"github.com/spine-run/spine/internal/spinetest"
	"github.com/spine-run/spine/mcpserver"
)

// lines hands on each JSON log line, decoded.
type lines chan map[string]any

func (l lines) Write(p []byte) (int, error) {
	var m map[string]any
	if json.Unmarshal(p, &m) == nil {
		l <- m
	}
	return len(p), nil
}

// TestMCPHTTPOperable: spine mcp --http answers /healthz, /livez, /readyz
// and /metrics; refuses a browser's request from another origin (403) while
// the same request without the browser's headers goes through; the probes
// need no token, /metrics and /mcp do; every request has an access log line
// with the token's name.
func TestMCPHTTPOperable(t *testing.T) {
	runner := spinetest.NewRunner(t, demoTools(), nil)
	server := mcpserver.NewServer(runner, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	log := make(lines, 100)
	m := mcpHTTP{runner: runner, tenants: door.NewTenants(nil, []door.Tenant{{Name: "default", Token: "mcp-ops-token"}}, 0), log: slog.New(slog.NewJSONHandler(log, nil)),
		health: func() map[string]string {
			return map[string]string{"crm": "", "docs": "mcp server docs is down: connecting: refused; reconnecting"}
		}}
	var stderr strings.Builder
	served := make(chan int, 1)
	go func() {
		served <- serveMCP(ctx, stop, ln, server, m, serving{grace: time.Minute, log: serverLog{name: "spine mcp", w: &stderr}})
	}()
	base := "http://" + ln.Addr().String()

	send := func(method, path, token string, header map[string]string) (int, map[string]any) {
		t.Helper()
		body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`
		req, _ := http.NewRequest(method, base+path, nil)
		if method == "POST" {
			req, _ = http.NewRequest(method, base+path, strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		id := resp.Header.Get("X-Request-Id")
		for l := range log {
			if l["msg"] == "request" && l["request_id"] == id {
				return resp.StatusCode, l
			}
		}
		return resp.StatusCode, nil
	}
	for _, path := range []string{"/healthz", "/livez", "/readyz"} {
		if code, line := send("GET", path, "", nil); code != 200 || line["path"] != path || line["token"] != "-" {
			t.Errorf("GET %s without the token: %d %v", path, code, line)
		}
	}
	// /readyz stays ready with an MCP server down, and names it.
	resp, err := http.Get(base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	var ready door.Probe
	json.NewDecoder(resp.Body).Decode(&ready)
	resp.Body.Close()
	if resp.StatusCode != 200 || ready.Status != "ready" || len(ready.Down) != 1 || ready.Down[0] != "docs" {
		t.Errorf("/readyz with docs down: %d %+v", resp.StatusCode, ready)
	}
	if code, _ := send("GET", "/metrics", "", nil); code != http.StatusUnauthorized {
		t.Errorf("GET /metrics without the token: %d", code)
	}
	if code, line := send("GET", "/metrics", "mcp-ops-token", nil); code != 200 || line["token"] != "default" {
		t.Errorf("GET /metrics: %d %v", code, line)
	}
	crossSite := map[string]string{"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}
	if code, line := send("POST", "/mcp", "mcp-ops-token", crossSite); code != http.StatusForbidden || line["status"] != 403.0 {
		t.Errorf("a cross-origin POST /mcp: %d %v", code, line)
	}
	if code, _ := send("POST", "/mcp", "mcp-ops-token", map[string]string{"Origin": "https://evil.example"}); code != http.StatusForbidden {
		t.Errorf("a POST /mcp with a foreign Origin and no Sec-Fetch-Site: %d", code)
	}
	if code, line := send("POST", "/mcp", "mcp-ops-token", nil); code != 200 || line["method"] != "POST" {
		t.Errorf("POST /mcp: %d %v", code, line)
	}
	if code, _ := send("POST", "/mcp", "", nil); code != http.StatusUnauthorized {
		t.Errorf("POST /mcp without the token: %d", code)
	}
	stop()
	if code := <-served; code != exitOK {
		t.Errorf("exit %d: %s", code, stderr.String())
	}
}
