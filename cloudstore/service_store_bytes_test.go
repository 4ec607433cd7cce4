package cloudstore_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/spine-run/spine/cloudstore"
	"github.com/spine-run/spine/internal/spinetest"
	"github.com/spine-run/spine/service"
	"github.com/spine-run/spine/sessionstore"
)

// TestStoreBytesPerToken: two replicas share a real store, and two tokens
// each may keep 4 MiB in it (Tenant.StoreBytes). Alice fills hers: her
// next run that would grow past it is answered 409 too_large, naming her
// store_bytes, and undone, on whichever replica; Bob's sessions still
// store, and load on the other replica. The owner index counts each of
// Alice's sessions at its newest generation's size, and forgets a deleted
// one, whose bytes are then Alice's again. Over file://, and over
// versitygw when SPINE_FLEET_VERSITYGW is set.
func TestStoreBytesPerToken(t *testing.T) {
	if testing.Short() {
		t.Skip("sessions of 3 MB in a store")
	}
	urls := spinetest.StoreURLs(t)
	for name, url := range urls {
		t.Run(name, func(t *testing.T) {
			st, err := cloudstore.Open(context.Background(), url)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			storeBytesPerToken(t, st)
		})
	}
}

func storeBytesPerToken(t *testing.T, st sessionstore.Store) {
	const aliceToken, bobToken = "alice-token-0123456789", "bob-token-0123456789"
	const limit = 4 << 20
	opts := func() *service.Options {
		return &service.Options{SessionStore: st, MaxSnapshot: 16 << 20, Tenants: []service.Tenant{
			{Name: "alice", Token: aliceToken, StoreBytes: limit},
			{Name: "bob", Token: bobToken, StoreBytes: limit},
		}}
	}
	_, ts1 := newSessionServer(t, nil, opts())
	_, ts2 := newSessionServer(t, nil, opts())
	alice1, alice2 := client{t: t, url: ts1.URL, token: aliceToken}, client{t: t, url: ts2.URL, token: aliceToken}
	bob1, bob2 := client{t: t, url: ts1.URL, token: bobToken}, client{t: t, url: ts2.URL, token: bobToken}
	alice := sessionstore.Owner(aliceToken)

	const grow = "import os\nblob = os.urandom(3_000_000)\nlen(blob)"
	a1 := alice1.create()
	if got := alice1.mustRun(a1, grow); got != "3000000" {
		t.Fatal(got)
	}
	a2 := alice2.create()
	status, out := alice2.run(a2, grow)
	if status != http.StatusConflict || out.Error == nil || out.Error.Kind != "too_large" ||
		!strings.Contains(out.Error.Message, `"alice"`) || !strings.Contains(out.Error.Message, "store_bytes") {
		t.Fatalf("alice's run past her store_bytes: %d %+v, want 409 too_large naming her store_bytes", status, out.Error)
	}
	t.Logf("refused: %s", out.Error.Message)
	if got := alice1.mustRun(a2, "'blob' in dir()"); got != "false" {
		t.Fatalf("the refused run was not undone: %s", got)
	}
	ownerIs(t, st, alice, a1, a2)

	// Bob's sessions are not held back by Alice's.
	b1 := bob2.create()
	if got := bob2.mustRun(b1, grow); got != "3000000" {
		t.Fatal(got)
	}
	if got := bob1.mustRun(b1, "len(blob)"); got != "3000000" {
		t.Fatalf("bob's session on the other replica: %s", got)
	}
	ownerIs(t, st, sessionstore.Owner(bobToken), b1)

	// A deleted session leaves the index, and its bytes are free again.
	if status, raw, _ := alice2.send("DELETE", "/v1/sessions/"+a1, "", nil); status != http.StatusNoContent {
		t.Fatalf("DELETE: %d %s", status, raw)
	}
	ownerIs(t, st, alice, a2)
	if got := alice2.mustRun(a2, grow); got != "3000000" {
		t.Fatalf("after the delete: %s", got)
	}
	ownerIs(t, st, alice, a2)
	if got := alice1.mustRun(a2, "len(blob)"); got != "3000000" {
		t.Fatalf("alice's session on the other replica: %s", got)
	}
}

// ownerIs checks that the owner index counts exactly the sessions ids, each
// at the size of its newest generation in the store.
func ownerIs(t *testing.T, st sessionstore.Store, owner string, ids ...string) {
	t.Helper()
	ctx := context.Background()
	var want int64
	for _, id := range ids {
		rd, _, err := st.Get(ctx, id, 1<<30)
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		n, err := io.Copy(io.Discard, rd)
		rd.Close()
		if err != nil {
			t.Fatal(err)
		}
		want += n
	}
	sessions, total, err := st.OwnerBytes(ctx, owner)
	if err != nil || sessions != len(ids) || total != want {
		t.Fatalf("the owner index: %d sessions, %d bytes, %v; the store holds %d sessions, %d bytes", sessions, total, err, len(ids), want)
	}
	t.Logf("%d sessions, %d bytes", sessions, total)
}
