package mcpserver_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/spine-run/spine/fleet"
	"github.com/spine-run/spine/internal/spinetest"
	"github.com/spine-run/spine/mcpserver"
	"github.com/spine-run/spine/sessionstore"
)

// replica is a server on a store, over streamable HTTP on a loopback port,
// with a Runner of its own.
type replica struct {
	server *mcpserver.Server
	url    string
}

// newReplica serves a server on the store at storeURL (opened for it
// alone), with its own Runner.
func newReplica(t *testing.T, storeURL string, write fleet.WritePolicy) *replica {
	t.Helper()
	st, err := sessionstore.Open(t.Context(), storeURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	r := spinetest.NewRunner(t, manifest, nil)
	server := mcpserver.NewServer(r, &mcpserver.Options{Store: st, StoreWrite: write})
	t.Cleanup(func() { server.Close(context.Background()) })
	return &replica{server: server, url: spinetest.ServeHTTP(t, server.HTTPHandler(nil)).URL}
}

// deleteSession sends DELETE for MCP session id with token to r and
// returns the status.
func deleteSession(t *testing.T, r *replica, id, token string) int {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodDelete, r.url+"/mcp", nil)
	req.Header.Set("Mcp-Session-Id", id)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestStoreDrain: under the write policy hibernate nothing is written per
// call; Close (the drain) writes every session, which another replica then
// serves.
func TestStoreDrain(t *testing.T) {
	if testing.Short() {
		t.Skip("two Runners")
	}
	store := "file://" + t.TempDir()
	a, b := newReplica(t, store, fleet.WriteHibernate), newReplica(t, store, fleet.WriteHibernate)
	v := spinetest.NewRouter(t, a.url, "", "")
	first, second := v.Connect(t), v.Connect(t)
	value(t, first, source("n = 1"))
	value(t, second, source("n = 2"))
	st, err := sessionstore.Open(t.Context(), store)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Head(t.Context(), first.ID()); err != sessionstore.ErrNotFound {
		t.Fatalf("stored before the drain: %v", err)
	}
	if err := a.server.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	v.To(t, b.url)
	if got := value(t, first, source("n")); got != "1" {
		t.Errorf("the first session through b: %s", got)
	}
	if got := value(t, second, source("n")); got != "2" {
		t.Errorf("the second session through b: %s", got)
	}
}

// TestStoreOwner: a client with another token cannot load, run or end an
// MCP session it learned the id of, on any replica, and the owner's state
// is untouched.
func TestStoreOwner(t *testing.T) {
	if testing.Short() {
		t.Skip("two Runners")
	}
	store := "file://" + t.TempDir()
	a, b := newReplica(t, store, fleet.WriteRun), newReplica(t, store, fleet.WriteRun)
	v := spinetest.NewRouter(t, a.url, "alpha", "")
	cs := v.Connect(t)
	value(t, cs, source("secret = 'alpha'"))
	for _, to := range []*replica{a, b} { // a holds it live; b would load it
		thief := spinetest.NewRouter(t, to.url, "beta", cs.ID()).Connect(t)
		res, err := thief.CallTool(t.Context(), &mcp.CallToolParams{Name: mcpserver.ToolName, Arguments: source("secret = 'beta'\nsecret")})
		if err == nil {
			t.Errorf("another token's call through %s: %s", to.url, spinetest.Text(res))
		}
		if status := deleteSession(t, to, cs.ID(), "beta"); status != http.StatusNotFound {
			t.Errorf("another token's DELETE through %s: %d", to.url, status)
		}
		if status := deleteSession(t, to, cs.ID(), ""); status != http.StatusNotFound {
			t.Errorf("a DELETE without a token through %s: %d", to.url, status)
		}
	}
	v.To(t, b.url)
	if got := value(t, cs, source("secret")); got != `"alpha"` {
		t.Errorf("the owner's state through b: %s", got)
	}
}
