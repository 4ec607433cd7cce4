package cloudstore_test

import (
	"context"
	"errors"
	"io"
	"testing"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/cloudstore"
	"github.com/spine-run/spine/internal/heapwatch"
	"github.com/spine-run/spine/internal/spinetest"
	"github.com/spine-run/spine/service"
	"github.com/spine-run/spine/sessionstore"
)

// TestStoreStreamMemory: a session of about 200 MB of incompressible data is
// written to a real store after its run (WriteRun), and another replica
// loads it from there, state and all; each takes the Host's heap up by no
// more than service.StreamMemory and a margin for the request around it,
// not by a multiple of the session. Through a file:// store, and through a
// real S3-compatible server when SPINE_FLEET_VERSITYGW names versitygw's
// binary (make fleet-test builds it into build/bin).
func TestStoreStreamMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("a 200 MB session")
	}
	urls := spinetest.StoreURLs(t)
	r := spinetest.NewRunner(t, tools.Manifest(), &spine.Options{PoolSize: -1, Sessions: spine.SessionOptions{Idle: -1}})
	// A Runner that hibernates its sessions to a directory, to make room
	// for another live one, and hands each to its Server's store.
	var hibernating *service.Server
	rh := spinetest.NewRunner(t, tools.Manifest(), &spine.Options{PoolSize: -1, Sessions: spine.SessionOptions{
		Idle: -1, MaxLive: 1, Dir: t.TempDir(),
		OnHibernate: func(s *spine.Session, snapshot io.Reader) { hibernating.Hibernated(s, snapshot) },
	}})
	for _, name := range []string{"file", "s3"} {
		url, ok := urls[name]
		if !ok {
			continue
		}
		t.Run(name, func(t *testing.T) {
			st, err := cloudstore.Open(context.Background(), url)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			storeStreamMemory(t, r, st)
			hibernateStreamMemory(t, rh, st, &hibernating)
		})
	}
}

// storeStreamMemory is TestStoreStreamMemory with one store.
func storeStreamMemory(t *testing.T, r *spine.Runner, st sessionstore.Store) {
	const margin = 4 << 20 // the request around the write or the load
	limit := uint64(service.StreamMemory + margin)
	svc, ts := newSessionServer(t, r, &service.Options{SessionStore: st})
	one := client{t: t, url: ts.URL}
	id := one.create()
	if got := one.mustRun(id, "import os, hashlib\nbig = os.urandom(200_000_000)\nsum = hashlib.sha256(big).hexdigest()\nlen(big)"); got != "200000000" {
		t.Fatal(got)
	}
	// A second run changes next to nothing, and its write stores the whole
	// session again: what it takes beyond the first is the write's.
	var got string
	wrote := heapwatch.Run(func() {
		got = one.mustRun(id, "n = len(big)\nn")
	})
	if got != "200000000" {
		t.Fatal(got)
	}
	rd, meta, err := st.Get(t.Context(), id, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	size, err := io.Copy(io.Discard, rd)
	rd.Close()
	if err != nil || size < 200_000_000 {
		t.Fatalf("the stored snapshot: %d bytes, %v", size, err)
	}
	t.Logf("a run in a session of 200 MB and its write to the store (generation %d, %d bytes): %v", meta.Generation, size, wrote)
	if wrote.Grew() > limit {
		t.Errorf("the run and its write took the heap up %d bytes, over StreamMemory %d + %d", wrote.Grew(), service.StreamMemory, margin)
	}
	if err := svc.Close(context.Background()); err != nil {
		t.Fatal(err)
	}

	// The second replica writes on hibernate only: the run that loads the
	// session writes nothing, and what is measured is the load.
	_, ts2 := newSessionServer(t, r, &service.Options{SessionStore: st, SessionWrite: service.WriteHibernate})
	two := client{t: t, url: ts2.URL}
	loaded := heapwatch.Run(func() {
		got = two.mustRun(id, "len(big)")
	})
	if got != "200000000" {
		t.Fatalf("the loaded session: %s", got)
	}
	t.Logf("a run that loaded the session from the store: %v", loaded)
	if loaded.Grew() > limit {
		t.Errorf("loading took the heap up %d bytes, over StreamMemory %d + %d", loaded.Grew(), service.StreamMemory, margin)
	}
	if got := two.mustRun(id, "hashlib.sha256(big).hexdigest() == sum"); got != "true" {
		t.Fatalf("the loaded session's data: %s", got)
	}
}

// hibernateStreamMemory: a session of 200 MB that its Runner hibernates to
// make room for another is written to the store (WriteHibernate) within
// StreamMemory and a margin for the new session's making. It sets the
// Server in *hibernating, whose Hibernated the Runner calls.
func hibernateStreamMemory(t *testing.T, r *spine.Runner, st sessionstore.Store, hibernating **service.Server) {
	const margin = 4 << 20
	svc := service.New(r, &service.Options{SessionStore: st, SessionWrite: service.WriteHibernate})
	*hibernating = svc
	ts := spinetest.ServeHTTP(t, svc)
	t.Cleanup(func() { svc.Close(context.Background()) })
	c := client{t: t, url: ts.URL}
	id := c.create()
	if got := c.mustRun(id, "import os\nbig = os.urandom(200_000_000)\nlen(big)"); got != "200000000" {
		t.Fatal(got)
	}
	if _, err := st.Head(t.Context(), id); !errors.Is(err, sessionstore.ErrNotFound) {
		t.Fatalf("before its hibernation, the store has the session: %v", err)
	}
	var other string
	slept := heapwatch.Run(func() { other = c.create() })
	meta, err := st.Head(t.Context(), id)
	if err != nil {
		t.Fatalf("the hibernated session is not in the store: %v", err)
	}
	t.Logf("a new session that made the session of 200 MB hibernate, and its write to the store (generation %d): %v", meta.Generation, slept)
	if slept.Grew() > service.StreamMemory+margin {
		t.Errorf("hibernating took the heap up %d bytes, over StreamMemory %d + %d", slept.Grew(), service.StreamMemory, margin)
	}
	c.send("DELETE", "/v1/sessions/"+other, "", nil)
	c.send("DELETE", "/v1/sessions/"+id, "", nil)
}
