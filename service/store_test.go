package service_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/internal/spinetest"
	"github.com/spine-run/spine/service"
	"github.com/spine-run/spine/sessionstore"
)

// gate is a tool a program calls to stop until the test lets it go on:
// each call sends on reached, then waits for release.
type gate struct {
	reached, release chan struct{}
}

func newGate() *gate { return &gate{reached: make(chan struct{}), release: make(chan struct{})} }

func (g *gate) manifest() spine.Manifest {
	return spine.Manifest{"gate": spine.NewTool("Wait for the test to let the run go on.",
		func(ctx context.Context, _ struct{}) (int, error) {
			select {
			case g.reached <- struct{}{}:
			case <-ctx.Done():
				return 0, ctx.Err()
			}
			select {
			case <-g.release:
				return 0, nil
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		})}
}

// replicas returns n Servers, each over its own Runner of manifest, sharing
// one store, and a client of each.
func replicas(t *testing.T, n int, manifest spine.Manifest, st sessionstore.Store, policy service.WritePolicy) []client {
	t.Helper()
	var out []client
	for range n {
		r := spinetest.NewRunner(t, manifest, nil)
		_, ts := newSessionServer(t, r, &service.Options{SessionStore: st, SessionWrite: policy})
		out = append(out, client{t: t, url: ts.URL})
	}
	return out
}

func memStore(t *testing.T) sessionstore.Store {
	t.Helper()
	st, err := sessionstore.Open(context.Background(), "mem://")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// answer is a run's status and answer, sent from a goroutine.
type answer struct {
	status int
	resp   service.Response
	err    error
}

// runAsync runs source in session id at url and sends the answer on out.
func runAsync(ctx context.Context, url, id, source string, out chan<- answer) {
	body, _ := json.Marshal(map[string]string{"source": source})
	req, _ := http.NewRequestWithContext(ctx, "POST", url+"/v1/sessions/"+id+"/run", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		out <- answer{err: err}
		return
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var a service.Response
	err = json.Unmarshal(raw, &a)
	out <- answer{status: resp.StatusCode, resp: a, err: err}
}

// TestStoreOneID: a session made on one replica is served on another under
// the same id, with its state, and back; a delete on one is seen by the
// other.
func TestStoreOneID(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two Runners")
	}
	for _, url := range []string{"mem://", "file://" + t.TempDir()} {
		t.Run(strings.SplitN(url, ":", 2)[0], func(t *testing.T) {
			st, err := sessionstore.Open(context.Background(), url)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			rs := replicas(t, 2, nil, st, service.WriteRun)
			a, b := rs[0], rs[1]
			id := a.create()
			a.mustRun(id, "x = [1]")
			if got := b.mustRun(id, "x.append(2)\nx"); got != "[1,2]" {
				t.Fatalf("on the second replica: %s", got)
			}
			if got := a.mustRun(id, "x.append(3)\nx"); got != "[1,2,3]" {
				t.Fatalf("back on the first: %s", got)
			}
			if status, _, _ := b.send("DELETE", "/v1/sessions/"+id, "", nil); status != http.StatusNoContent {
				t.Fatalf("DELETE on the second replica: %d", status)
			}
			if status, out := a.run(id, "x"); status != http.StatusNotFound || out.Error.Kind != "not_found" {
				t.Fatalf("run on the first after the delete: %d %+v", status, out.Error)
			}
		})
	}
}

// TestStoreRace runs one session on two replicas at once, round after
// round, each run held in a tool until both are in flight: exactly one run
// of each round is stored and answered 200, the other is answered 409
// conflict, and the session's state is the line of the winners' runs, the
// same on both replicas.
func TestStoreRace(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two Runners")
	}
	g := newGate()
	rs := replicas(t, 2, g.manifest(), memStore(t), service.WriteRun)
	id := rs[0].create()
	rs[0].mustRun(id, "x = []")
	if got := rs[1].mustRun(id, "x"); got != "[]" {
		t.Fatalf("second replica: %s", got)
	}
	var want []string
	for round := range 6 {
		answers := make(chan answer, 2)
		for i, c := range rs {
			go runAsync(t.Context(), c.url, id, fmt.Sprintf("gate()\nx.append('r%d-%d')\nx", round, i), answers)
		}
		<-g.reached
		<-g.reached // both runs are past their check of the store
		g.release <- struct{}{}
		g.release <- struct{}{}
		won, lost := 0, 0
		for range 2 {
			a := <-answers
			switch {
			case a.err != nil:
				t.Fatal(a.err)
			case a.status == http.StatusOK:
				won++
				var got []string
				if err := json.Unmarshal(a.resp.Value, &got); err != nil || len(got) != len(want)+1 || !equal(got[:len(want)], want) {
					t.Fatalf("round %d: the winner's state %s, want %q and its own", round, a.resp.Value, want)
				}
				want = got
			case a.status == http.StatusConflict && a.resp.Error.Kind == "conflict":
				lost++
			default:
				t.Fatalf("round %d: status %d, %+v", round, a.status, a.resp.Error)
			}
		}
		if won != 1 || lost != 1 {
			t.Fatalf("round %d: %d won, %d lost", round, won, lost)
		}
	}
	wantJSON, _ := json.Marshal(want)
	for i, c := range rs {
		if got := c.mustRun(id, "x"); got != string(wantJSON) {
			t.Errorf("replica %d: %s, want %s", i, got, wantJSON)
		}
	}
	conflicts := 0.0
	for _, c := range rs {
		conflicts += spinetest.Metrics(t, c.url, "")[`spine_session_store_operations_total{operation="conflict"}`]
	}
	if conflicts != 6 {
		t.Errorf("spine_session_store_operations_total{operation=\"conflict\"} adds up to %v over the replicas, want 6", conflicts)
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestStoreStaleReplica pauses a replica in the middle of a run (in a tool)
// while the other runs the session three times; the paused one then ends
// its run holding a generation the store swept long ago: its write is
// refused (409), and the store keeps the newer state, which the paused
// replica serves from then on.
func TestStoreStaleReplica(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two Runners")
	}
	g := newGate()
	st := memStore(t)
	rs := replicas(t, 2, g.manifest(), st, service.WriteRun)
	paused, other := rs[0], rs[1]
	id := paused.create()
	paused.mustRun(id, "n = 0")
	answers := make(chan answer, 1)
	go runAsync(t.Context(), paused.url, id, "gate()\nn = -1\nn", answers)
	<-g.reached
	for range 3 {
		other.mustRun(id, "n += 1")
	}
	g.release <- struct{}{}
	a := <-answers
	if a.err != nil || a.status != http.StatusConflict || a.resp.Error.Kind != "conflict" {
		t.Fatalf("the stale replica's run: %v, status %d, %+v", a.err, a.status, a.resp.Error)
	}
	if meta, err := st.Head(t.Context(), id); err != nil || meta.Generation != 5 {
		t.Fatalf("store: %+v, %v; want generation 5 (create, 1 run, 3 runs)", meta, err)
	}
	for i, c := range rs {
		if got := c.mustRun(id, "n"); got != "3" {
			t.Errorf("replica %d: n = %s, want 3", i, got)
		}
	}
}

// TestStoreRestoreAs restores under a chosen id: the owner replaces its
// own session, another token is refused, a bad id is 400; and a snapshot
// of another Guest build in the store is refused with 503 other_image.
func TestStoreRestoreAs(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Server with tokens")
	}
	st := memStore(t)
	_, ts := newSessionServer(t, nil, &service.Options{Tokens: []string{"one", "two"}, SessionStore: st})
	one, two := client{t: t, url: ts.URL, token: "one"}, client{t: t, url: ts.URL, token: "two"}
	id := one.create()
	one.mustRun(id, "x = 'first'")
	blob := one.snapshot(id)
	one.mustRun(id, "x = 'second'")

	status, raw, _ := two.send("POST", "/v1/sessions/restore?id="+id, "application/octet-stream", blob)
	if status != http.StatusConflict {
		t.Fatalf("another token's restore under the id: %d %s", status, raw)
	}
	status, raw, _ = one.send("POST", "/v1/sessions/restore?id="+id, "application/octet-stream", blob)
	if status != http.StatusCreated || !strings.Contains(string(raw), id) {
		t.Fatalf("the owner's restore under its id: %d %s", status, raw)
	}
	if got := one.mustRun(id, "x"); got != `"first"` {
		t.Fatalf("after the restore: %s", got)
	}
	for _, bad := range []string{"a/b", "..", strings.Repeat("a", 65), "a%20b"} {
		if status, raw, _ := one.send("POST", "/v1/sessions/restore?id="+bad, "application/octet-stream", blob); status != http.StatusBadRequest {
			t.Errorf("restore under %q: %d %s", bad, status, raw)
		}
	}
	fresh := "another-build"
	other := sessionstore.Meta{Generation: 1, Owner: "", Image: strings.Repeat("0", 64)}
	if err := st.Put(t.Context(), fresh, other, int64(len(blob)), func(w io.Writer) error { _, err := w.Write(blob); return err }); err != nil {
		t.Fatal(err)
	}
	_, tsOpen := newSessionServer(t, nil, &service.Options{SessionStore: st})
	anyone := client{t: t, url: tsOpen.URL}
	status, raw, header := anyone.send("POST", "/v1/sessions/"+fresh+"/run", "application/json", []byte(`{"source": "1"}`))
	if status != http.StatusServiceUnavailable || !strings.Contains(string(raw), `"other_image"`) || header.Get("Spine-Snapshot-Image") != other.Image {
		t.Fatalf("a snapshot of another build: %d %s %v", status, raw, header)
	}
}

// TestStoreHibernateWrites: under WriteHibernate a session is written when
// its Runner hibernates it (here to make room for another live session),
// and another replica then serves it, state and all, without the first
// one stopping.
func TestStoreHibernateWrites(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two Runners")
	}
	st := memStore(t)
	var first *service.Server
	r := spinetest.NewRunner(t, nil, &spine.Options{Sessions: spine.SessionOptions{
		MaxLive:     1,
		OnHibernate: func(s *spine.Session, snapshot io.Reader) { first.Hibernated(s, snapshot) },
	}})
	first, ts := newSessionServer(t, r, &service.Options{SessionStore: st, SessionWrite: service.WriteHibernate})
	a := client{t: t, url: ts.URL}
	b := replicas(t, 1, nil, st, service.WriteHibernate)[0]
	id := a.create()
	a.mustRun(id, "x = 'kept'")
	if status, out := b.run(id, "x"); status != http.StatusNotFound {
		t.Fatalf("before it hibernates, the other replica: %d %+v", status, out.Error)
	}
	a.create() // the only live place: id hibernates
	if got := b.mustRun(id, "x"); got != `"kept"` {
		t.Fatalf("after it hibernated, the other replica: %s", got)
	}
}

// TestStoreWriteAnswer: under WriteAnswer each run is written after its
// answer; runs in a row on one replica each wait for the write before them,
// and once the last lands another replica serves the state.
func TestStoreWriteAnswer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two Runners")
	}
	st := memStore(t)
	rs := replicas(t, 2, nil, st, service.WriteAnswer)
	a, b := rs[0], rs[1]
	id := a.create()
	for i := range 5 {
		a.mustRun(id, fmt.Sprintf("n = %d", i))
	}
	spinetest.WaitFor(t, "the last run's write", func() bool {
		meta, err := st.Head(t.Context(), id)
		return err == nil && meta.Generation == 6
	})
	if got := b.mustRun(id, "n"); got != "4" {
		t.Fatalf("the other replica: n = %s", got)
	}
}
