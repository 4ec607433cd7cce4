package main

import (
	"encoding/json"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/spine-run/spine/internal/spinetest"
)

// TestMCPServersProcess: spine serve as a process, with --mcp-allow naming
// a loopback MCP server, gives a run that names it its tools, with the
// request's headers on the server's side; a server down is 502, a host
// not allowed 400; and the headers and the URL's path appear in neither an
// answer nor the log, --verbose's debug lines included.
func TestMCPServersProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the spine command")
	}
	var mu sync.Mutex
	var auth []string
	h := spinetest.MCPHandler(spinetest.NewMCPServer(0))
	ts := spinetest.ServeHTTP(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auth = append(auth, r.Header.Get("Authorization"))
		mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	u, _ := url.Parse(ts.URL)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := ln.Addr().String()
	ln.Close()

	bin := buildSpine(t)
	p, addr := start(t, bin, "serve", "--listen", "127.0.0.1:0", "--demo-tools", "--verbose", "--mcp-allow", u.Host+","+down)
	post := func(body string) (int, map[string]any) {
		t.Helper()
		resp, err := http.Post("http://"+addr+"/v1/run", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			t.Fatal(err)
		}
		if raw, _ := json.Marshal(out); strings.Contains(string(raw), "SECRET") {
			t.Errorf("an answer holds a secret: %s", raw)
		}
		return resp.StatusCode, out
	}
	server := func(url string) string {
		return `"mcp_servers": [{"name": "crm", "url": "` + url + `/SECRETPATH", "headers": {"Authorization": "Bearer SECRETTOKEN"}}]`
	}
	status, out := post(`{"source": "crm.add(a=20, b=1)['sum'] * lookup(key='pen')", ` + server(ts.URL) + `}`)
	if status != 200 || out["value"] != 42.0 {
		t.Fatalf("a run with an MCP server: %d %v", status, out)
	}
	mu.Lock()
	for _, a := range auth {
		if a != "Bearer SECRETTOKEN" {
			t.Errorf("a request to the server had Authorization %q", a)
		}
	}
	mu.Unlock()
	for _, c := range []struct {
		url    string
		status int
		kind   string
	}{
		{"http://" + down, http.StatusBadGateway, "mcp_server"},
		{"http://localhost:" + u.Port(), http.StatusBadRequest, "bad_request"},
	} {
		status, out = post(`{"source": "1", ` + server(c.url) + `}`)
		if e, _ := out["error"].(map[string]any); status != c.status || e["kind"] != c.kind || !strings.Contains(e["message"].(string), "mcp_servers[0]: mcp server crm") {
			t.Errorf("%s: %d %v", c.url, status, out)
		}
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	var lines []string
	for line := range p.lines {
		lines = append(lines, line)
	}
	if err := <-p.exited; err != nil {
		t.Errorf("exit: %v", err)
	}
	log := strings.Join(append(p.before, lines...), "\n")
	if strings.Contains(log, "SECRET") || !strings.Contains(log, "mcp_server") {
		t.Errorf("the log:\n%s", log)
	}
}
