package spinetest

import (
	"net/http"
	"net/url"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Router sends an MCP client's HTTP requests where a test chooses: to one
// replica or another, with a bearer token, and (when ID is set) under
// another MCP session's id. It is what a load balancer without stickiness
// does to a client, with the test choosing the replica.
type Router struct {
	mu    sync.Mutex
	to    *url.URL
	token string
	id    string
}

// NewRouter returns a Router to base (scheme and host) with token ("" for
// none) and, when id is set, every request after the initialize under id.
func NewRouter(tb testing.TB, base, token, id string) *Router {
	tb.Helper()
	u, err := url.Parse(base)
	if err != nil {
		tb.Fatal(err)
	}
	return &Router{to: u, token: token, id: id}
}

// To routes the next requests to base.
func (r *Router) To(tb testing.TB, base string) {
	tb.Helper()
	u, err := url.Parse(base)
	if err != nil {
		tb.Fatal(err)
	}
	r.mu.Lock()
	r.to = u
	r.mu.Unlock()
}

// RoundTrip sends req where the Router routes.
func (r *Router) RoundTrip(req *http.Request) (*http.Response, error) {
	r.mu.Lock()
	to, token, id := r.to, r.token, r.id
	r.mu.Unlock()
	req = req.Clone(req.Context())
	req.URL.Scheme, req.URL.Host, req.Host = to.Scheme, to.Host, to.Host
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if id != "" && req.Header.Get("Mcp-Session-Id") != "" {
		req.Header.Set("Mcp-Session-Id", id)
	}
	return http.DefaultTransport.RoundTrip(req)
}

// Connect returns a client session over streamable HTTP whose requests r
// routes, to the path /mcp; it is closed when the test ends.
func (r *Router) Connect(tb testing.TB) *mcp.ClientSession {
	tb.Helper()
	r.mu.Lock()
	endpoint := r.to.Scheme + "://" + r.to.Host + "/mcp"
	r.mu.Unlock()
	transport := &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: &http.Client{Transport: r}}
	cs, err := NewMCPClient().Connect(tb.Context(), transport, nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cs.Close() })
	return cs
}
