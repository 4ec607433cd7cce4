package mcpserver_test

import (
	"context"
	"strings"
	"testing"

	"github.com/spine-run/spine/internal/spinetest"
	"github.com/spine-run/spine/mcpserver"
	"github.com/spine-run/spine/sessionstore"
)

// TestStoreBytesOf: two tokens' MCP sessions share a file:// store, and
// each token's may keep 4 MiB there (Options.StoreBytesOf). The token that
// fills it has its next growing call refused, naming its store_bytes, and
// undone; the other token's session still stores, and loads on the second
// replica.
func TestStoreBytesOf(t *testing.T) {
	if testing.Short() {
		t.Skip("two Runners")
	}
	store := "file://" + t.TempDir()
	alpha, beta := sessionstore.Owner("alpha"), sessionstore.Owner("beta")
	limits := func(owner string) int64 {
		if owner == alpha || owner == beta {
			return 4 << 20
		}
		return 0
	}
	newLimited := func() *replica {
		st, err := sessionstore.Open(t.Context(), store)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		r := spinetest.NewRunner(t, manifest, nil)
		server := mcpserver.NewServer(r, &mcpserver.Options{Store: st, MaxSnapshot: 16 << 20, StoreBytesOf: limits})
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
	if n, total, err := st.OwnerBytes(t.Context(), beta); err != nil || n != 1 || total < 3_000_000 {
		t.Fatalf("beta's index: %d sessions, %d bytes, %v", n, total, err)
	}
}
