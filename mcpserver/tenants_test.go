package mcpserver_test

import (
	"context"
	"testing"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/door"
	"github.com/spine-run/spine/internal/spinetest"
	"github.com/spine-run/spine/mcpserver"
)

// TestTenantsShareTheRunner: with a tokens file's tenants (door.Tenants, as
// spine mcp --http resolves them), each token's MCP sessions count in a
// share of the Runner's, as spine serve's do. Of a Runner holding two live
// sessions, each of two tokens gets one: alice's second session hibernates
// her first, never bob's, though bob's is the one used least recently.
func TestTenantsShareTheRunner(t *testing.T) {
	if testing.Short() {
		t.Skip("a Runner of its own")
	}
	r := spinetest.NewRunner(t, manifest, &spine.Options{PoolSize: -1, Sessions: spine.SessionOptions{Max: 10, MaxLive: 2, Idle: -1}})
	tenants := door.NewTenants(r, []door.Tenant{{Name: "alice", Token: "alice-token"}, {Name: "bob", Token: "bob-token"}}, 0)
	server := mcpserver.NewServer(r, &mcpserver.Options{ShareOf: tenants.ShareOf})
	t.Cleanup(func() { server.Close(context.Background()) })
	url := spinetest.ServeHTTP(t, server.HTTPHandler(nil)).URL

	bob := spinetest.NewRouter(t, url, "bob-token", "").Connect(t)
	value(t, bob, source("x = 'bob'"))
	first := spinetest.NewRouter(t, url, "alice-token", "").Connect(t)
	value(t, first, source("y = 1"))
	second := spinetest.NewRouter(t, url, "alice-token", "").Connect(t)
	value(t, second, source("y = 2"))

	share := func(token string) spine.TenantStats {
		return tenants.ShareOf(door.Tenant{Token: token}.Owner()).Tenant.Stats()
	}
	if a, b := share("alice-token"), share("bob-token"); a.Sessions != 2 || a.Live != 1 || b.Sessions != 1 || b.Live != 1 {
		t.Fatalf("alice %+v, bob %+v: want alice's first hibernated, bob's live", a, b)
	}
	if got := value(t, first, source("y")); got != "1" {
		t.Errorf("alice's hibernated session woke with y = %s", got)
	}
	if got := value(t, bob, source("x")); got != `"bob"` {
		t.Errorf("bob's session: x = %s", got)
	}
}
