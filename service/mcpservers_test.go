package service_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/spine-run/spine/internal/spinetest"
	"github.com/spine-run/spine/service"
)

// mcpRemote is the test MCP server over streamable HTTP on loopback, as a
// run request's mcp_servers reach it: it records the headers of its
// requests and says when a session ends (its DELETE).
type mcpRemote struct {
	url     string
	host    string // host:port, for Options.MCPAllow
	mu      sync.Mutex
	headers []http.Header
	ended   chan string // the id of each session ended
}

func newMCPRemote(t testing.TB) *mcpRemote {
	t.Helper()
	m := &mcpRemote{ended: make(chan string, 64)}
	h := spinetest.MCPHandler(spinetest.NewMCPServer(0))
	ts := spinetest.ServeHTTP(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.mu.Lock()
		m.headers = append(m.headers, r.Header.Clone())
		m.mu.Unlock()
		h.ServeHTTP(w, r)
		if r.Method == http.MethodDelete {
			select {
			case m.ended <- r.Header.Get("Mcp-Session-Id"):
			default: // a benchmark's: nobody waits for them
			}
		}
	}))
	m.url = ts.URL + "/mcp/SECRETPATH"
	u, _ := url.Parse(ts.URL)
	m.host = u.Host
	return m
}

// sessions returns the ids of the sessions the server saw.
func (m *mcpRemote) sessions() map[string]bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	ids := map[string]bool{}
	for _, h := range m.headers {
		if id := h.Get("Mcp-Session-Id"); id != "" {
			ids[id] = true
		}
	}
	return ids
}

func (m *mcpRemote) server(headers map[string]string) map[string]any {
	return map[string]any{"name": "crm", "url": m.url, "headers": headers}
}

// TestMCPServers: a run's mcp_servers are its tools, as name.tool, called
// with the request's headers, over a session of the run's own, ended when
// the run ends; the next run, another token's, has another.
func TestMCPServers(t *testing.T) {
	remote := newMCPRemote(t)
	_, ts := newSessionServer(t, nil, &service.Options{MCPAllow: []string{remote.host}, Tokens: []string{"token-a", "token-b"}})
	src := "s = crm.add(a=2, b=40)['sum']\nprint(crm.echo('hi', times=2))\n[s, lookup(key='book')]"
	for _, token := range []string{"token-a", "token-b"} {
		c := client{t: t, url: ts.URL, token: token}
		server := remote.server(map[string]string{"Authorization": "Bearer " + token + "-remote"})
		if token == "token-b" { // the shape of the Anthropic API's mcp_servers
			server = map[string]any{"type": "url", "name": "crm", "url": remote.url, "authorization_token": token + "-remote"}
		}
		status, out := c.runWith("/v1/run", run{"source": src, "mcp_servers": []any{server}})
		if status != http.StatusOK || string(out.Value) != "[42,21]" || out.Stdout != "hihi\n" || out.ToolCalls != 3 {
			t.Fatalf("%s: status %d, value %s, stdout %q, error %+v", token, status, out.Value, out.Stdout, out.Error)
		}
		<-remote.ended // the run's session, ended with it
	}
	if n := len(remote.sessions()); n != 2 {
		t.Errorf("%d sessions for two runs, want one each", n)
	}
	remote.mu.Lock()
	defer remote.mu.Unlock()
	for _, h := range remote.headers {
		if a := h.Get("Authorization"); a != "Bearer token-a-remote" && a != "Bearer token-b-remote" {
			t.Errorf("a request to the server had Authorization %q", a)
		}
	}
}

// TestMCPServersClientTools: a run with client tools and an MCP server
// pauses for the client's, calls the server's, and ends its session when
// it ends; a client tool in the server's namespace is refused.
func TestMCPServersClientTools(t *testing.T) {
	remote := newMCPRemote(t)
	_, ts := newSessionServer(t, nil, &service.Options{MCPAllow: []string{remote.host}})
	c := client{t: t, url: ts.URL}
	src := "w = get_weather(city='Paris')\ncrm.add(a=w['temp'], b=1)['sum']"
	status, out := c.runWith("/v1/run", run{"source": src, "tools": []any{weather}, "mcp_servers": []any{remote.server(nil)}})
	paused(t, status, out, `get_weather{"city":"Paris"}`)
	status, out = c.results(out.RunID, value(out.Pending[0].ID, map[string]any{"temp": 20}))
	if status != http.StatusOK || out.Status != "done" || string(out.Value) != "21" {
		t.Fatalf("end: status %d %+v", status, out)
	}
	<-remote.ended

	clash := map[string]any{"name": "crm.add", "input_schema": map[string]any{"type": "object"}}
	status, out = c.runWith("/v1/run", run{"source": "1", "tools": []any{clash}, "mcp_servers": []any{remote.server(nil)}})
	if status != http.StatusBadRequest || out.Error == nil || !strings.Contains(out.Error.Message, "tools[0] (crm.add) is in the namespace of mcp_servers' crm") {
		t.Errorf("a client tool under the server's name: status %d, %+v", status, out.Error)
	}
	// A server named as a tool of the Runner's.
	named := map[string]any{"name": "lookup", "url": remote.url}
	status, out = c.runWith("/v1/run", run{"source": "1", "mcp_servers": []any{named}})
	if status != http.StatusBadRequest || out.Error == nil || !strings.Contains(out.Error.Message, `clashes with the Runner's tool "lookup"`) {
		t.Errorf("a server named as a Runner's tool: status %d, %+v", status, out.Error)
	}
	<-remote.ended
	// A session's run too.
	id := c.create()
	body := run{"source": "crm.add(a=1, b=2)['sum']", "mcp_servers": []any{remote.server(nil)}}
	if status, out := c.runWith("/v1/sessions/"+id+"/run", body); status != http.StatusOK || string(out.Value) != "3" {
		t.Errorf("a session's run: status %d, %s, %+v", status, out.Value, out.Error)
	}
	<-remote.ended
}

// TestMCPServersRefused: a server that allows none, a host it does not
// allow, a server that is down: 400 or 502 naming the entry, the run not
// started, and neither the headers nor the URL's path in the answer or the
// log.
func TestMCPServersRefused(t *testing.T) {
	remote := newMCPRemote(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := ln.Addr().String()
	ln.Close()
	var logged bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelDebug}))
	secret := map[string]string{"Authorization": "Bearer SECRETTOKEN"}
	for _, c := range []struct {
		allow  []string
		url    string
		status int
		kind   string
		want   string
	}{
		{nil, remote.url, http.StatusBadRequest, "bad_request", `this server takes no "mcp_servers"`},
		{[]string{"localhost"}, remote.url, http.StatusBadRequest, "bad_request", "mcp_servers[0]: mcp server crm (http://" + remote.host + "): " + remote.host + " is not a host this server allows"},
		{[]string{down}, "http://" + down + "/SECRETPATH", http.StatusBadGateway, "mcp_server", "mcp_servers[0]: mcp server crm (http://" + down + "): connecting: dial tcp " + down + ": connect: connection refused"},
	} {
		_, ts := newSessionServer(t, nil, &service.Options{MCPAllow: c.allow, Logger: logger})
		cl := client{t: t, url: ts.URL}
		status, out := cl.runWith("/v1/run", run{"source": "print('ran')", "mcp_servers": []any{map[string]any{"name": "crm", "url": c.url, "headers": secret}}})
		if status != c.status || out.Error == nil || out.Error.Kind != c.kind || !strings.HasPrefix(out.Error.Message, c.want) || out.Stdout != "" {
			t.Errorf("allow %v, %s: status %d, %+v, want %d %s %q", c.allow, c.url, status, out.Error, c.status, c.kind, c.want)
		}
	}
	if !strings.Contains(logged.String(), "connection refused") || strings.Contains(logged.String(), "SECRET") {
		t.Errorf("the log:\n%s", logged.String())
	}
}

// BenchmarkMCPServers: the cost of naming an MCP server (on loopback) in a
// run's request: connecting, listing its tools and, after the answer,
// closing the session, against the same run with a demo tool of the
// Runner's.
//
//	go test -run '^$' -bench BenchmarkMCPServers -benchtime 200x ./service/
func BenchmarkMCPServers(b *testing.B) {
	remote := newMCPRemote(b)
	svc := service.New(runner, &service.Options{MCPAllow: []string{remote.host}})
	b.Cleanup(func() { svc.Close(context.Background()) })
	ts := spinetest.ServeHTTP(b, svc)
	for _, c := range []struct {
		name string
		body run
	}{
		{"runner_tool", run{"source": "lookup(key='book')"}},
		{"mcp_server", run{"source": "crm.add(a=1, b=20)['sum']", "mcp_servers": []any{remote.server(nil)}}},
	} {
		data, _ := json.Marshal(c.body)
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				resp, err := http.Post(ts.URL+"/v1/run", "application/json", bytes.NewReader(data))
				if err != nil {
					b.Fatal(err)
				}
				raw, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK || !bytes.Contains(raw, []byte(`"value":21`)) {
					b.Fatalf("status %d: %s", resp.StatusCode, raw)
				}
			}
		})
	}
}

// TestMCPServersShare: while one token's requests wait for a slow server,
// they hold that token's share of the places for connecting, not the
// others': its next request is 429, another token's goes through.
func TestMCPServersShare(t *testing.T) {
	fast := newMCPRemote(t)
	arrived, gate := make(chan struct{}, 1), make(chan struct{})
	h := spinetest.MCPHandler(spinetest.NewMCPServer(0))
	slow := spinetest.ServeHTTP(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case arrived <- struct{}{}:
		default:
		}
		<-gate
		h.ServeHTTP(w, r)
	}))
	slowHost := strings.TrimPrefix(slow.URL, "http://")
	_, ts := newSessionServer(t, nil, &service.Options{Slots: 2, MCPAllow: []string{fast.host, slowHost}, Tokens: []string{"token-a", "token-b"}})
	a, b := client{t: t, url: ts.URL, token: "token-a"}, client{t: t, url: ts.URL, token: "token-b"}
	body := func(url string) run {
		return run{"source": "crm.add(a=1, b=2)['sum']", "mcp_servers": []any{map[string]any{"name": "crm", "url": url}}}
	}
	first := make(chan int)
	go func() { // not a.runWith: no t.Fatal outside the test's goroutine
		data, _ := json.Marshal(body(slow.URL))
		req, _ := http.NewRequest("POST", ts.URL+"/v1/run", bytes.NewReader(data))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer token-a")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			first <- 0
			return
		}
		resp.Body.Close()
		first <- resp.StatusCode
	}()
	<-arrived // token-a's request is connecting, and waits
	if status, out := a.runWith("/v1/run", body(fast.url)); status != http.StatusTooManyRequests || !strings.Contains(out.Error.Message, "this token has 1 requests connecting") {
		t.Errorf("token-a's second request: status %d, %+v", status, out.Error)
	}
	if status, out := b.runWith("/v1/run", body(fast.url)); status != http.StatusOK || string(out.Value) != "3" {
		t.Errorf("token-b's request: status %d, %+v", status, out.Error)
	}
	close(gate)
	if status := <-first; status != http.StatusOK {
		t.Errorf("token-a's first request: status %d", status)
	}
}
