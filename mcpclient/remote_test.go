package mcpclient_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spine-run/spine/internal/spinetest"
	"github.com/spine-run/spine/mcpclient"
)

// TestAllowList: what an entry allows, port and form included.
func TestAllowList(t *testing.T) {
	for _, c := range []struct {
		entry string
		url   string
		ok    bool
	}{
		{"mcp.example.com", "https://mcp.example.com/mcp", true},
		{"mcp.example.com", "https://MCP.Example.com./mcp", true},
		{"mcp.example.com", "http://mcp.example.com/mcp", true},
		{"mcp.example.com", "https://mcp.example.com:8443/mcp", false}, // no port: the scheme's
		{"mcp.example.com", "http://mcp.example.com:443/mcp", false},
		{"mcp.example.com:8443", "https://mcp.example.com:8443/mcp", true},
		{"mcp.example.com:8443", "https://mcp.example.com/mcp", false},
		{"mcp.example.com", "https://a.mcp.example.com/mcp", false},
		{"mcp.example.com", "https://mcp.example.com.evil.net/mcp", false},
		{"*.example.com", "https://a.b.example.com/mcp", true},
		{"*.example.com", "https://example.com/mcp", false},
		{"*.example.com", "https://badexample.com/mcp", false},
		{"127.0.0.1:9000", "http://127.0.0.1:9000/mcp", true},
		{"127.0.0.1:9000", "http://[::ffff:127.0.0.1]:9000/mcp", true},
		{"127.0.0.1:9000", "http://localhost:9000/mcp", false}, // never resolved
		{"localhost:9000", "http://127.0.0.1:9000/mcp", false},
		{"127.0.0.1:9000", "http://127.1:9000/mcp", false},
		{"127.0.0.1:9000", "http://2130706433:9000/mcp", false},
		{"[::1]:9000", "http://[::1]:9000/mcp", true},
		{"::1", "http://[::1]/mcp", true},
		{"::1", "http://[0:0::1]/mcp", true},
		{"mcp.example.com", "ftp://mcp.example.com/mcp", false},
		{"key.example.com", "https://\u212Aey.example.com/mcp", false}, // the Kelvin sign, which lowers to k
		{"mcp.example.com", "https://user:pw@mcp.example.com/mcp", false},
	} {
		allow, err := mcpclient.ParseAllowList([]string{c.entry})
		if err != nil {
			t.Fatalf("%s: %v", c.entry, err)
		}
		err = mcpclient.NewRemotes(&mcpclient.RemoteOptions{Allow: allow}).Check([]mcpclient.Remote{{Name: "srv", URL: c.url}})
		if (err == nil) != c.ok {
			t.Errorf("%s allows %s: %v, want %v", c.entry, c.url, err, c.ok)
		}
	}
}

func TestAllowListRefused(t *testing.T) {
	for _, entry := range []string{"0.0.0.0", "[::]", "224.0.0.1", "127.1", "0x7f000001", "a..b", "-a.com", "[1.2.3.4]", "[::1", "host:0", "host:99999", "host:x", "*.", "fe80::1%eth0", "exa_mple.com"} {
		if _, err := mcpclient.ParseAllowList([]string{entry}); err == nil {
			t.Errorf("%q is taken", entry)
		}
	}
	if l, err := mcpclient.ParseAllowList([]string{" ", ""}); err != nil || !l.Empty() {
		t.Errorf("blank entries: %v", err)
	}
}

// remoteServer serves the test MCP server over streamable HTTP on
// loopback and records the headers and methods of its requests.
type remoteServer struct {
	ts    *httptest.Server
	url   string
	allow *mcpclient.AllowList
	mu    sync.Mutex
	seen  []http.Header
	ended chan struct{} // closed at the first DELETE (a session's end)
	once  sync.Once
}

func newRemoteServer(t *testing.T, path string) *remoteServer {
	t.Helper()
	rs := &remoteServer{ended: make(chan struct{})}
	mcpHandler := spinetest.MCPHandler(spinetest.NewMCPServer(0))
	ts := spinetest.ServeHTTP(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rs.mu.Lock()
		rs.seen = append(rs.seen, r.Header.Clone())
		rs.mu.Unlock()
		if r.Method == http.MethodDelete {
			rs.once.Do(func() { close(rs.ended) })
		}
		if r.URL.Path == "/old" { // moved within the origin
			http.Redirect(w, r, "/mcp", http.StatusPermanentRedirect)
			return
		}
		mcpHandler.ServeHTTP(w, r)
	}))
	rs.ts, rs.url = ts, ts.URL+path
	u, _ := url.Parse(ts.URL)
	allow, err := mcpclient.ParseAllowList([]string{u.Host})
	if err != nil {
		t.Fatal(err)
	}
	rs.allow = allow
	return rs
}

func (rs *remoteServer) headers() []http.Header {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.seen
}

// TestRemoteOpen: a request's server, reached on loopback: its tools under
// its name, called with the request's headers on every request, and its
// session ended by Close.
func TestRemoteOpen(t *testing.T) {
	rs := newRemoteServer(t, "/mcp")
	remotes := mcpclient.NewRemotes(&mcpclient.RemoteOptions{Allow: rs.allow})
	tools, err := remotes.Open(t.Context(), []mcpclient.Remote{{Name: "srv", URL: rs.url, Headers: map[string]string{"Authorization": "Bearer s3cret-token", "X-Tenant": "acme"}}})
	if err != nil {
		t.Fatal(err)
	}
	m := tools.Tools()
	if _, ok := m["srv.add"]; !ok || len(m) < 5 {
		t.Fatalf("tools %v", names(m))
	}
	v, err := m["srv.add"].Call(t.Context(), json.RawMessage(`{"a": 2, "b": 40}`))
	if got, _ := json.Marshal(v); err != nil || string(got) != `{"sum":42}` {
		t.Fatalf("srv.add: %s, %v", got, err)
	}
	for _, h := range rs.headers() {
		if h.Get("Authorization") != "Bearer s3cret-token" || h.Get("X-Tenant") != "acme" {
			t.Errorf("a request without the headers: %v", h)
		}
	}
	tools.Close()
	<-rs.ended // the session's DELETE
	tools.Close()
	if _, err := m["srv.add"].Call(t.Context(), json.RawMessage(`{"a": 1, "b": 1}`)); err == nil {
		t.Error("a call after Close worked")
	}
}

// TestRemoteRefused: what Check refuses, before any connection, naming the
// server and never its secrets.
func TestRemoteRefused(t *testing.T) {
	allow, _ := mcpclient.ParseAllowList([]string{"mcp.example.com"})
	remotes := mcpclient.NewRemotes(&mcpclient.RemoteOptions{Allow: allow, MaxServers: 2})
	ok := mcpclient.Remote{Name: "srv", URL: "https://mcp.example.com/k/SECRETPATH?key=SECRETKEY"}
	with := func(change func(*mcpclient.Remote)) []mcpclient.Remote {
		r := ok
		change(&r)
		return []mcpclient.Remote{r}
	}
	for _, c := range []struct {
		servers []mcpclient.Remote
		want    string
	}{
		{with(func(r *mcpclient.Remote) { r.URL = "https://other.example.com/k/SECRETPATH" }), "other.example.com:443 is not a host this server allows"},
		{with(func(r *mcpclient.Remote) { r.URL = "https://mcp.example.com:444/k/SECRETPATH" }), "mcp.example.com:444 is not a host"},
		{with(func(r *mcpclient.Remote) { r.URL = "https://u:SECRETPW@mcp.example.com/" }), "user information"},
		{with(func(r *mcpclient.Remote) { r.URL = "" }), `"url" is missing`},
		{with(func(r *mcpclient.Remote) { r.Name = "a.b" }), "Python identifier"},
		{with(func(r *mcpclient.Remote) { r.Name = "" }), `"name" is missing`},
		{with(func(r *mcpclient.Remote) { r.Headers = map[string]string{"Host": "SECRETHOST"} }), `"Host" is set by the protocol`},
		{with(func(r *mcpclient.Remote) { r.Headers = map[string]string{"mcp-session-id": "x"} }), "set by the protocol"},
		{with(func(r *mcpclient.Remote) { r.Headers = map[string]string{"X-Key": "SECRET\r\nX-Other: 1"} }), "line break"},
		{with(func(r *mcpclient.Remote) { r.Headers = map[string]string{"Bad Name": "x"} }), "not a header name"},
		{with(func(r *mcpclient.Remote) { r.Type = "sse" }), `"type" is "sse"`},
		{with(func(r *mcpclient.Remote) {
			r.AuthorizationToken, r.Headers = "SECRETTOKEN", map[string]string{"authorization": "Bearer SECRETOTHER"}
		}), `an "authorization_token" and an Authorization header`},
		{with(func(r *mcpclient.Remote) { r.AuthorizationToken = "SECRET\nX-Other: 1" }), "line break"},
		{[]mcpclient.Remote{ok, ok}, "named twice"},
		{[]mcpclient.Remote{ok, ok, ok}, "3 MCP servers, over the limit of 2"},
	} {
		err := remotes.Check(c.servers)
		var re *mcpclient.RemoteError
		if !errors.As(err, &re) || !re.Refused || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "SECRET") {
			t.Errorf("%+v: %v, want refused: %s", c.servers, err, c.want)
		}
	}
	if err := mcpclient.NewRemotes(nil).Check([]mcpclient.Remote{ok}); err == nil || !strings.Contains(err.Error(), "allow list is empty") {
		t.Errorf("no allow list: %v", err)
	}
}

// TestRemoteDown: a server that cannot be reached, one that answers 401
// echoing the request, one that redirects: the server's fault, named, and
// no secret of the request in the text.
func TestRemoteDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := ln.Addr().String()
	ln.Close()
	echo := spinetest.ServeHTTP(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/loop") {
			http.Redirect(w, r, r.URL.Path, http.StatusTemporaryRedirect)
			return
		}
		if strings.Contains(r.URL.Path, "redirect") {
			http.Redirect(w, r, "http://elsewhere.example/SECRETPATH", http.StatusTemporaryRedirect)
			return
		}
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":1,"error":{"code":-32001,"message":"bad token %s at %s"}}`, r.Header.Get("Authorization"), r.URL)
	}))
	echoHost := strings.TrimPrefix(echo.URL, "http://")
	allow, _ := mcpclient.ParseAllowList([]string{gone, echoHost})
	remotes := mcpclient.NewRemotes(&mcpclient.RemoteOptions{Allow: allow})
	token := "SECRETTOKEN-1234" // as the Anthropic API's mcp_servers give it
	for _, c := range []struct{ url, want string }{
		{"http://" + gone + "/SECRETPATH", "connection refused"},
		{echo.URL + "/SECRETPATH?key=SECRETKEY", "bad token"},
		{echo.URL + "/redirect/SECRETPATH", "redirected to http://elsewhere.example:80"},
		{echo.URL + "/loop/SECRETPATH", "redirected more than 3 times"},
	} {
		_, err := remotes.Open(t.Context(), []mcpclient.Remote{{Type: "url", Name: "srv", URL: c.url, AuthorizationToken: token}})
		var re *mcpclient.RemoteError
		if !errors.As(err, &re) || re.Refused || re.Server != "srv" || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "SECRET") {
			t.Errorf("%s: %v, want the server's fault: %s, no secret", c.url, err, c.want)
		}
	}
}

// TestRemoteBounds: a server listing more tools than allowed, a schema
// over its bound, a response over its bound.
func TestRemoteBounds(t *testing.T) {
	rs := newRemoteServer(t, "/")
	for _, c := range []struct {
		opts mcpclient.RemoteOptions
		want string
	}{
		{mcpclient.RemoteOptions{MaxTools: 3}, "lists more than 3 tools"},
		{mcpclient.RemoteOptions{MaxSchema: 40}, "schema is"},
		{mcpclient.RemoteOptions{MaxResponse: 200}, "over 200 bytes"},
	} {
		c.opts.Allow = rs.allow
		_, err := mcpclient.NewRemotes(&c.opts).Open(t.Context(), []mcpclient.Remote{{Name: "srv", URL: rs.url}})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %s", c.opts, err, c.want)
		}
	}
}

// TestRemoteCallFails: a call of a server that went away fails with an
// error that names neither the URL's path nor the headers.
func TestRemoteCallFails(t *testing.T) {
	rs := newRemoteServer(t, "/mcp/SECRETPATH")
	tools, err := mcpclient.NewRemotes(&mcpclient.RemoteOptions{Allow: rs.allow}).Open(t.Context(),
		[]mcpclient.Remote{{Name: "srv", URL: rs.url + "?key=SECRETKEY", Headers: map[string]string{"X-Api-Key": "SECRETKEY-123456"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer tools.Close()
	rs.ts.CloseClientConnections()
	rs.ts.Close()
	_, err = tools.Tools()["srv.add"].Call(t.Context(), json.RawMessage(`{"a": 1, "b": 1}`))
	if err == nil || strings.Contains(err.Error(), "SECRET") || !strings.Contains(err.Error(), "[redacted]") {
		t.Errorf("a call of a server gone: %v", err)
	}
}

// TestRemoteListsNothing: a server with no tool is the server's fault,
// named, not a run with nothing to call.
func TestRemoteListsNothing(t *testing.T) {
	empty := mcp.NewServer(&mcp.Implementation{Name: "empty", Version: "v0"}, nil)
	ts := spinetest.ServeHTTP(t, spinetest.MCPHandler(empty))
	u, _ := url.Parse(ts.URL)
	allow, _ := mcpclient.ParseAllowList([]string{u.Host})
	_, err := mcpclient.NewRemotes(&mcpclient.RemoteOptions{Allow: allow}).Open(t.Context(), []mcpclient.Remote{{Name: "srv", URL: ts.URL}})
	var re *mcpclient.RemoteError
	if !errors.As(err, &re) || re.Refused || !strings.Contains(err.Error(), "mcp server srv (http://"+u.Host+")") || !strings.Contains(err.Error(), "lists no tool") {
		t.Errorf("a server with no tool: %v", err)
	}
}

// TestRemoteTimeout: a server that does not answer its handshake is given
// up at the Timeout, named.
func TestRemoteTimeout(t *testing.T) {
	release := make(chan struct{})
	ts := spinetest.ServeHTTP(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer close(release) // before the server's Close, which waits for its handlers
	u, _ := url.Parse(ts.URL)
	allow, _ := mcpclient.ParseAllowList([]string{u.Host})
	_, err := mcpclient.NewRemotes(&mcpclient.RemoteOptions{Allow: allow, Timeout: 50 * time.Millisecond}).Open(t.Context(), []mcpclient.Remote{{Name: "srv", URL: ts.URL}})
	if err == nil || !strings.Contains(err.Error(), "mcp server srv (http://"+u.Host+"): connecting: no answer within 50ms") {
		t.Errorf("a server that does not answer: %v", err)
	}
}

// TestRemoteRedirect: a redirect within the server's origin is followed,
// with the headers.
func TestRemoteRedirect(t *testing.T) {
	rs := newRemoteServer(t, "/old")
	remotes := mcpclient.NewRemotes(&mcpclient.RemoteOptions{Allow: rs.allow})
	tools, err := remotes.Open(t.Context(), []mcpclient.Remote{{Name: "srv", URL: rs.url, Headers: map[string]string{"X-Key": "k"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer tools.Close()
	if _, ok := tools.Tools()["srv.add"]; !ok {
		t.Fatalf("tools %v", names(tools.Tools()))
	}
	seen := rs.headers()
	for _, h := range seen {
		if h.Get("X-Key") != "k" {
			t.Errorf("a request without the header: %v", h)
		}
	}
	if len(seen) < 4 {
		t.Errorf("%d requests: the redirects not followed?", len(seen))
	}
}
