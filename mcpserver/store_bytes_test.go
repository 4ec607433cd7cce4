package mcpserver_test

import (
	"context"
	"strings"
	"testing"

	"github.com/spine-run/spine/door"
	"github.com/spine-run/spine/internal/spinetest"
	"github.com/spine-run/spine/mcpserver"
	"github.com/spine-run/spine/sessionstore"
)

// TestShareOfStoreBytes: two tokens' MCP sessions share a file:// store,
// and each token's may keep 4 MiB there (their store_bytes, through
// door.Tenants as spine mcp --http resolves a tokens file, Options.ShareOf). The token that
// fills it has its next growing call refused, naming its store_bytes, and
// undone; the other token's session still stores, and loads on the second
// replica.
func TestShareOfStoreBytes(t *testing.T) {
	if testing.Short() {
		t.Skip("two Runners")
	}
	store := "file://" + t.TempDir()
	tenants := []door.Tenant{{Name: "a", Token: "alpha", StoreBytes: 4 << 20}, {Name: "b", Token: "beta", StoreBytes: 4 << 20}}
	newLimited := func() *replica {
		st, err := sessionstore.Open(t.Context(), store)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		r := spinetest.NewRunner(t, manifest, nil)
		shares := door.NewTenants(r, tenants, 0)
		server := mcpserver.NewServer(r, &mcpserver.Options{Store: st, MaxSnapshot: 16 << 20, ShareOf: shares.ShareOf})
		t.Cleanup(func() { server.Close(context.Background()) })
		return &replica{server: server, url: spinetest.ServeHTTP(t, server.HTTPHandler(nil)).URL}
	}
	a, b := newLimited(), newLimited()
	const grow = "import os\nblob = os.urandom(3_000_000)\nlen(blob)"

	first := spinetest.NewRouter(t, a.url, "alpha", "").Connect(t)
	if got := value(t, first, source(grow)); got != "3000000" {
		t.Fatal(got)
	}
	second := spinetest.NewRouter(t, b.url, "alpha", "").Connect(t)
	res := call(t, second, source(grow))
	if text := spinetest.Text(res); !res.IsError || !strings.Contains(text, "store_bytes") {
		t.Fatalf("alpha past its store_bytes: IsError %v, %q", res.IsError, text)
	}
	t.Logf("refused: %s", spinetest.Text(res))
	if got := value(t, second, source("'blob' in dir()")); got != "false" {
		t.Fatalf("the refused call was not undone: %s", got)
	}

	router := spinetest.NewRouter(t, b.url, "beta", "")
	other := router.Connect(t)
	if got := value(t, other, source(grow)); got != "3000000" {
		t.Fatalf("beta's call: %s", got)
	}
	router.To(t, a.url)
	if got := value(t, other, source("len(blob)")); got != "3000000" {
		t.Fatalf("beta's session on the other replica: %s", got)
	}
	st, err := sessionstore.Open(t.Context(), store)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if n, total, err := st.OwnerBytes(t.Context(), tenants[1].Owner()); err != nil || n != 1 || total < 3_000_000 {
		t.Fatalf("beta's index: %d sessions, %d bytes, %v", n, total, err)
	}
}
