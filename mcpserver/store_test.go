package mcpserver_test

import (
	"context"
	"net/http"
	"strings"
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
	server := mcpserver.NewServer(r, manifest, &mcpserver.Options{Store: st, StoreWrite: write})
	t.Cleanup(func() { server.Close(context.Background()) })
	return &replica{server: server, url: spinetest.ServeHTTP(t, server.HTTPHandler(nil)).URL}
}

// TestStoreTwoReplicas: one MCP client's session is served by two servers,
// each with its own Runner, on one file:// store: the state one call sets
// through one replica is read through the other, under the same MCP session
// id; a DELETE ends it on both.
func TestStoreTwoReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("two Runners")
	}
	twoReplicas(t, "file://"+t.TempDir())
}

// twoReplicas is TestStoreTwoReplicas on the store at store.
func twoReplicas(t *testing.T, store string) {
	a, b := newReplica(t, store, fleet.WriteRun), newReplica(t, store, fleet.WriteRun)
	v := spinetest.NewRouter(t, a.url, "", "")
	cs := v.Connect(t)
	id := cs.ID()
	if sessionstore.CheckID(id) != nil {
		t.Fatalf("MCP session id %q", id)
	}
	value(t, cs, source("x = ['a']"))
	v.To(t, b.url)
	if got := value(t, cs, source("x.append('b')\nx")); got != `["a","b"]` {
		t.Fatalf("through b: %s", got)
	}
	v.To(t, a.url) // a holds x = ['a'] live: it loads b's newer generation
	if got := value(t, cs, source("x.append('a')\nx")); got != `["a","b","a"]` {
		t.Fatalf("through a again: %s", got)
	}
	v.To(t, b.url)
	if got := value(t, cs, source("x")); got != `["a","b","a"]` {
		t.Fatalf("through b again: %s", got)
	}
	if cs.ID() != id {
		t.Errorf("the MCP session id changed: %q, then %q", id, cs.ID())
	}

	// fresh=true through a starts afresh on both.
	v.To(t, a.url)
	if got := value(t, cs, map[string]any{"source": "'x' in globals()", "fresh": true}); got != "false" {
		t.Errorf("fresh: %s", got)
	}
	v.To(t, b.url)
	if got := value(t, cs, source("'x' in globals()")); got != "false" {
		t.Errorf("after fresh, through b: %s", got)
	}

	// The client ends its MCP session through a: b no longer has it.
	if err := cs.Close(); err != nil {
		t.Fatal(err)
	}
	if status := deleteSession(t, a, id, ""); status != http.StatusNotFound {
		t.Errorf("a second DELETE: %d", status)
	}
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

// TestStoreRace: two calls of one MCP session overlap on two replicas; the
// one stored second conflicts, its effect is undone, and the session goes
// on from the other's.
func TestStoreRace(t *testing.T) {
	if testing.Short() {
		t.Skip("two Runners")
	}
	race(t, "file://"+t.TempDir())
}

// race is TestStoreRace on the store at store.
func race(t *testing.T, store string) {
	a, b := newReplica(t, store, fleet.WriteRun), newReplica(t, store, fleet.WriteRun)
	v := spinetest.NewRouter(t, a.url, "", "")
	cs := v.Connect(t)
	value(t, cs, source("x = []"))
	// A second client of the same MCP session (the same id), through b.
	other := spinetest.NewRouter(t, b.url, "", cs.ID()).Connect(t)
	if got := value(t, other, source("x")); got != "[]" {
		t.Fatalf("through b: %s", got)
	}

	held := make(chan *mcp.CallToolResult, 1)
	go func() {
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: mcpserver.ToolName, Arguments: source("x.append('a')\ngate()")})
		if err != nil {
			t.Error(err)
		}
		held <- res
	}()
	<-gate.Entered // a runs, from the generation b holds too
	if got := value(t, other, source("x.append('b')\nx")); got != `["b"]` {
		t.Fatalf("through b while a ran: %s", got)
	}
	gate.Let()
	res := <-held
	if res == nil || !res.IsError || !strings.Contains(spinetest.Text(res), "another replica ran this MCP session at the same time") {
		t.Fatalf("the call stored second: %+v", res)
	}
	if got := value(t, cs, source("x")); got != `["b"]` {
		t.Errorf("through a after its conflict: %s", got)
	}
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
