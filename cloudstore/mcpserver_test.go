package cloudstore_test

// The MCP server's tests of two replicas on one store, over file:// and over
// versitygw, a real S3-compatible server (SPINE_FLEET_VERSITYGW; make
// fleet-test builds it). They are here, not in mcpserver, because only this
// module opens an S3 store.

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/spine-run/spine/cloudstore"
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
	st, err := cloudstore.Open(t.Context(), storeURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	r := spinetest.NewRunner(t, manifest, nil)
	server := mcpserver.NewServer(r, &mcpserver.Options{Store: st, StoreWrite: write})
	t.Cleanup(func() { server.Close(context.Background()) })
	return &replica{server: server, url: spinetest.ServeHTTP(t, server.HTTPHandler(nil)).URL}
}

// TestMCPStoreTwoReplicas: one MCP client's session is served by two servers,
// each with its own Runner, on one file:// store: the state one call sets
// through one replica is read through the other, under the same MCP session
// id; a DELETE ends it on both.
func TestMCPStoreTwoReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("two Runners")
	}
	twoReplicas(t, "file://"+t.TempDir())
}

// twoReplicas is TestMCPStoreTwoReplicas on the store at store.
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

// TestMCPStoreRace: two calls of one MCP session overlap on two replicas; the
// one stored second conflicts, its effect is undone, and the session goes
// on from the other's.
func TestMCPStoreRace(t *testing.T) {
	if testing.Short() {
		t.Skip("two Runners")
	}
	race(t, "file://"+t.TempDir())
}

// race is TestMCPStoreRace on the store at store.
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

// TestMCPStoreTwoReplicasS3 is TestMCPStoreTwoReplicas on versitygw, a real
// S3-compatible server (SPINE_FLEET_VERSITYGW; make fleet-test builds it).
func TestMCPStoreTwoReplicasS3(t *testing.T) {
	if testing.Short() {
		t.Skip("two Runners and an S3 server")
	}
	store, ok := spinetest.S3Server(t)
	if !ok {
		t.Skip("no versitygw: set SPINE_FLEET_VERSITYGW")
	}
	twoReplicas(t, store)
}

// TestMCPStoreRaceS3 is TestMCPStoreRace on versitygw: S3's own create-only
// writes decide the race.
func TestMCPStoreRaceS3(t *testing.T) {
	if testing.Short() {
		t.Skip("two Runners and an S3 server")
	}
	store, ok := spinetest.S3Server(t)
	if !ok {
		t.Skip("no versitygw: set SPINE_FLEET_VERSITYGW")
	}
	race(t, store)
}

func call(t *testing.T, cs *mcp.ClientSession, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: mcpserver.ToolName, Arguments: args})
	if err != nil {
		t.Fatalf("CallTool %v: %v", args, err)
	}
	return res
}

// value calls run_python and returns the run's value as JSON text; an error
// result or a notice fails the test.
func value(t *testing.T, cs *mcp.ClientSession, args map[string]any) string {
	t.Helper()
	res := call(t, cs, args)
	sc := structured(t, res)
	if res.IsError || sc.Notice != "" {
		t.Fatalf("%v: IsError %v, %q", args, res.IsError, spinetest.Text(res))
	}
	return string(sc.Value)
}

// structured decodes a result's structuredContent (zero when there is none).
func structured(t *testing.T, res *mcp.CallToolResult) mcpserver.Result {
	t.Helper()
	var sc mcpserver.Result
	if res.StructuredContent == nil {
		return sc
	}
	data, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(data, &sc); err != nil {
		t.Fatalf("structuredContent %s: %v", data, err)
	}
	return sc
}

func source(src string) map[string]any { return map[string]any{"source": src} }
