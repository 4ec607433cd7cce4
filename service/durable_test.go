package service_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/internal/spinetest"
	"github.com/spine-run/spine/service"
	"github.com/spine-run/spine/sessionstore"
)

// durableProgram asks the caller twice, with a call of the server's tool
// lookup (key) and random bytes between; its value shows what it got.
func durableProgram(key string) string {
	return "import random\nr = random.random()\na = get_weather('Paris')\n" +
		"try:\n    lookup(key='" + key + "')\nexcept RuntimeError:\n    pass\n" +
		"print('between', r)\nb = get_weather(city=a['next'])\n[a['next'], b, 0 <= r < 1]"
}

// lookupsOf counts the lookups of key made since the last count.
func lookupsOf(key string) int {
	n := 0
	for {
		select {
		case k := <-tools.Lookups:
			if k == key {
				n++
			}
		default:
			return n
		}
	}
}

// durableServers are replicas sharing a store, as spine serve --replica
// NAME --session-store URL.
func durableServers(t *testing.T, names ...string) ([]*service.Server, []client, sessionstore.Store) {
	st, err := sessionstore.Open(context.Background(), "mem://")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	var svcs []*service.Server
	var cs []client
	for _, name := range names {
		svc, ts := newSessionServer(t, nil, &service.Options{Replica: name, SessionStore: st})
		svcs = append(svcs, svc)
		cs = append(cs, client{t: t, url: ts.URL})
	}
	return svcs, cs, st
}

// TestDurablePause: with a store, a run paused on a replica that drains
// is continued by another, from its record: the continuation asks nothing
// the run asked already, calls no server tool the run called, and ends as
// the run would have; the drain does not wait for the run. A replica that
// still holds a run another took over answers 409, and so does a second
// replica racing for it.
func TestDurablePause(t *testing.T) {
	svcs, cs, _ := durableServers(t, "a", "b", "c", "d")
	a, b, c, d := cs[0], cs[1], cs[2], cs[3]
	lookupsOf("")

	// Drained: a hands the run off; b continues it.
	status, out := a.runWith("/v1/run", run{"source": durableProgram("durable-1"), "tools": []any{weather}})
	paused(t, status, out, `get_weather{"city":"Paris"}`)
	runID, first := out.RunID, out.Pending[0].ID
	svcs[0].Drain()
	if err := svcs[0].Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
	status, out = a.results(runID, value(first, map[string]any{"next": "Oslo"}))
	if status != http.StatusServiceUnavailable {
		t.Fatalf("a continuation reaching the drained replica: %d %+v", status, out.Error)
	}
	status, out = b.results(runID, value(first, map[string]any{"next": "Oslo"}))
	paused(t, status, out, `get_weather{"city":"Oslo"}`)
	if !strings.HasPrefix(out.RunID, "run_b.") || !strings.HasPrefix(out.Stdout, "between ") || lookupsOf("durable-1") != 1 {
		t.Fatalf("continued on b as %s, stdout %q", out.RunID, out.Stdout)
	}
	moved := out.RunID
	status, out = b.results(moved, value(out.Pending[0].ID, "snow"))
	if status != http.StatusOK || out.Status != "done" || string(out.Value) != `["Oslo","snow",true]` || lookupsOf("durable-1") != 0 || out.Record != nil {
		t.Fatalf("end: %d %s %s %+v", status, out.Status, out.Value, out.Error)
	}
	// Ended: its ids are gone from the store too.
	for _, id := range []string{runID, moved} {
		if status, out = c.results(id, value(first, 1)); status != http.StatusNotFound {
			t.Errorf("a continuation of %s after the end: %d %+v", id, status, out.Error)
		}
	}

	// Another replica takes over a run its replica still holds (as one that
	// died would): the holder then answers 409 naming the run's new id, and
	// so does a racer.
	status, out = b.runWith("/v1/run", run{"source": durableProgram("durable-2"), "tools": []any{weather}})
	paused(t, status, out, `get_weather{"city":"Paris"}`)
	runID, first = out.RunID, out.Pending[0].ID
	var wg sync.WaitGroup
	answers := make([]int, 2)
	var winner client
	var newID string
	for i, racer := range []client{c, d} {
		wg.Go(func() {
			var out service.Response
			answers[i], out = racer.results(runID, value(first, map[string]any{"next": "Rome"}))
			if answers[i] == http.StatusOK {
				paused(t, answers[i], out, `get_weather{"city":"Rome"}`)
				winner, newID = racer, out.RunID
			}
		})
	}
	wg.Wait()
	if answers[0]+answers[1] != http.StatusOK+http.StatusConflict {
		t.Fatalf("racing continuations on c and d: %v, want one 200 and one 409", answers)
	}
	status, out = b.results(runID, value(first, map[string]any{"next": "Rome"}))
	if status != http.StatusConflict || out.Error == nil || out.Error.Kind != "conflict" || out.RunID != newID {
		t.Fatalf("the holder, once another took its run over: %d run_id %q %+v, want 409 naming %s", status, out.RunID, out.Error, newID)
	}
	status, out = winner.results(runID, value(first, map[string]any{"next": "Rome"}))
	if status != http.StatusConflict || !strings.Contains(out.Error.Message, "continues as run run_") {
		t.Fatalf("the same continuation again: %d %+v", status, out.Error)
	}
	if n := lookupsOf("durable-2"); n != 1 {
		t.Fatalf("lookups of durable-2: %d, want 1 (the winner's, past the pause; neither the loser nor the holder)", n)
	}
}

// TestDurableDiverged: a run continued from its record that does not reach
// its stored pause (here the store was edited to ask for another city)
// stops with a clear error, calling no client tool.
func TestDurableDiverged(t *testing.T) {
	_, cs, st := durableServers(t, "a", "b")
	status, out := cs[0].runWith("/v1/run", run{"source": durableProgram("durable-3"), "tools": []any{weather}})
	paused(t, status, out, `get_weather{"city":"Paris"}`)
	runs := sessionstore.Runs(st)
	sum := sha256.Sum256([]byte(out.RunID))
	key := hex.EncodeToString(sum[:])
	r, meta, err := runs.Get(t.Context(), key, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(r)
	r.Close()
	edited := bytes.Replace(data, []byte(`{"city":"Paris"}`), []byte(`{"city":"Lima"}`), 1)
	meta.Generation++
	if err := runs.Put(t.Context(), key, meta, 1<<30, func(w io.Writer) error { _, err := w.Write(edited); return err }); err != nil {
		t.Fatal(err)
	}
	status, out = cs[1].results(out.RunID, value(out.Pending[0].ID, map[string]any{"next": "Oslo"}))
	if status != http.StatusInternalServerError || out.Error == nil || out.Error.Kind != "run_diverged" ||
		!strings.Contains(out.Error.Message, `get_weather({"city":"Paris"}), the stored pause call_1 get_weather({"city":"Lima"})`) {
		t.Fatalf("a continuation that does not reach its pause: %d %+v", status, out.Error)
	}
	if n := lookupsOf("durable-3"); n != 0 {
		t.Fatalf("lookups: %d", n)
	}
}

// TestDurableRestart: a run paused on a server that stops (Close) is
// continued by the same replica's next process, where without a store it
// would be 410 run_lost.
func TestDurableRestart(t *testing.T) {
	svcs, cs, st := durableServers(t, "a")
	status, out := cs[0].runWith("/v1/run", run{"source": durableProgram("durable-4"), "tools": []any{weather}})
	paused(t, status, out, `get_weather{"city":"Paris"}`)
	if err := svcs[0].Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	_, ts := newSessionServer(t, nil, &service.Options{Replica: "a", SessionStore: st})
	again := client{t: t, url: ts.URL}
	status, out = again.results(out.RunID, value(out.Pending[0].ID, map[string]any{"next": "Oslo"}))
	paused(t, status, out, `get_weather{"city":"Oslo"}`)
	status, out = again.results(out.RunID, value(out.Pending[0].ID, "fog"))
	if status != http.StatusOK || string(out.Value) != `["Oslo","fog",true]` || lookupsOf("durable-4") != 1 {
		t.Fatalf("end: %d %s %+v", status, out.Value, out.Error)
	}
}

// TestDurableReplayNotCharged: a run taken over is charged the time it
// used before its pause once, not again for its replay to that pause: a
// program that spent most of its limit before pausing can be continued.
// Its time used at the end is the stored one and what ran after the pause,
// well under the stored one twice over when the part before the pause is
// most of it.
func TestDurableReplayNotCharged(t *testing.T) {
	_, cs, st := durableServers(t, "a", "b")
	src := "n = 0\nfor i in range(1_500_000):\n    n += i\na = get_weather('Paris')\n[a, n]"
	status, out := cs[0].runWith("/v1/run", run{"source": src, "tools": []any{weather}})
	paused(t, status, out, `get_weather{"city":"Paris"}`)
	sum := sha256.Sum256([]byte(out.RunID))
	r, _, err := sessionstore.Runs(st).Get(t.Context(), hex.EncodeToString(sum[:]), 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	var stored struct {
		Used time.Duration `json:"used_ns"`
	}
	err = json.NewDecoder(r).Decode(&stored)
	r.Close()
	if err != nil || stored.Used <= 0 {
		t.Fatalf("the stored run: used %v, %v", stored.Used, err)
	}
	status, out = cs[1].results(out.RunID, value(out.Pending[0].ID, "fog"))
	if status != http.StatusOK || string(out.Value) != `["fog",1124999250000]` {
		t.Fatalf("end: %d %s %+v", status, out.Value, out.Error)
	}
	if used := time.Duration(out.Timing.RunMS * float64(time.Millisecond)); used >= stored.Used*3/2 {
		t.Errorf("the run's time used at its end is %v, its time used at its pause %v: its replay was charged", used, stored.Used)
	}
}

// TestDurableUnkeptPauseDrain: a kept run whose latest pause could not be
// written (its record past MaxRecord) is not handed off by a drain: the
// store holds its earlier pause, whose results it has had, and another
// replica continuing from there would not reach this one. The drain
// waits for it, and the results continue it.
func TestDurableUnkeptPauseDrain(t *testing.T) {
	st, err := sessionstore.Open(context.Background(), "mem://")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	r := spinetest.NewRunner(t, spinetest.NewTools().Manifest(), &spine.Options{PoolSize: -1, MaxRecord: 64 << 10})
	svc, ts := newSessionServer(t, r, &service.Options{Replica: "a", SessionStore: st})
	c := client{t: t, url: ts.URL}
	status, out := c.runWith("/v1/run", run{"source": "a = get_weather('Paris')\nb = get_weather(city=str(len(a)))\n[len(a), b]", "tools": []any{weather}})
	paused(t, status, out, `get_weather{"city":"Paris"}`)
	runID := out.RunID
	status, out = c.results(runID, value(out.Pending[0].ID, strings.Repeat("x", 100<<10)))
	paused(t, status, out, `get_weather{"city":"102400"}`)
	svc.Drain()
	status, out = c.results(runID, value(out.Pending[0].ID, "fog"))
	if status != http.StatusOK || out.Status != "done" || out.Error != nil || string(out.Value) != `[102400,"fog"]` {
		t.Fatalf("the results after the drain began: status %d %s (error %+v)", status, out.Value, out.Error)
	}
	if err := svc.Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// TestDurableOwnerBytes: a paused run kept in the store counts in what its
// token may keep there (Tenant.StoreBytes), with its sessions: past it the
// run is not kept, and goes on in its replica's memory.
func TestDurableOwnerBytes(t *testing.T) {
	st, err := sessionstore.Open(context.Background(), "mem://")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	_, ts := newSessionServer(t, nil, &service.Options{Replica: "a", SessionStore: st, Tenants: []service.Tenant{
		{Name: "small", Token: "token-small", StoreBytes: 64},
		{Name: "big", Token: "token-big", StoreBytes: 1 << 30},
	}})
	src := "a = get_weather('Paris')\na"
	for _, c := range []struct {
		token string
		kept  bool
	}{{"token-small", false}, {"token-big", true}} {
		cl := client{t: t, url: ts.URL, token: c.token}
		status, out := cl.runWith("/v1/run", run{"source": src, "tools": []any{weather}})
		paused(t, status, out, `get_weather{"city":"Paris"}`)
		sum := sha256.Sum256([]byte(out.RunID))
		_, err := sessionstore.Runs(st).Head(t.Context(), hex.EncodeToString(sum[:]))
		if kept := err == nil; kept != c.kept {
			t.Errorf("%s: the run kept in the store: %v (%v), want %v", c.token, kept, err, c.kept)
		}
		n, size, err := st.OwnerBytes(t.Context(), sessionstore.Owner(c.token))
		if err != nil || c.kept != (n == 1 && size > 0) {
			t.Errorf("%s: the owner's index: %d entries, %d bytes, %v", c.token, n, size, err)
		}
		status, out = cl.results(out.RunID, value(out.Pending[0].ID, "fog"))
		if status != http.StatusOK || string(out.Value) != `"fog"` {
			t.Fatalf("%s: end: %d %s %+v", c.token, status, out.Value, out.Error)
		}
		if n, _, err := st.OwnerBytes(t.Context(), sessionstore.Owner(c.token)); err != nil || n != 0 {
			t.Errorf("%s: the owner's index after the run: %d entries, %v", c.token, n, err)
		}
	}
}

// TestDurableSecondPause: a run continued once on its replica, which then
// stops, is taken over at its second pause: the call its record answers
// is counted as the replay passes it, so the stored pause is reached (it
// waited out its time limit, 408, when the count left it out).
func TestDurableSecondPause(t *testing.T) {
	svcs, cs, st := durableServers(t, "a")
	status, out := cs[0].runWith("/v1/run", run{"source": durableProgram("durable-2nd"), "tools": []any{weather}})
	paused(t, status, out, `get_weather{"city":"Paris"}`)
	status, out = cs[0].results(out.RunID, value(out.Pending[0].ID, map[string]any{"next": "Oslo"}))
	paused(t, status, out, `get_weather{"city":"Oslo"}`)
	if err := svcs[0].Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	_, ts := newSessionServer(t, nil, &service.Options{Replica: "b", SessionStore: st})
	status, out = client{t: t, url: ts.URL}.results(out.RunID, value(out.Pending[0].ID, "fog"))
	if status != http.StatusOK || string(out.Value) != `["Oslo","fog",true]` || lookupsOf("durable-2nd") != 1 {
		t.Fatalf("end: %d %s %+v", status, out.Value, out.Error)
	}
}

// TestDurableMovedTwiceEnds: a run taken over twice (its first and second
// replicas drained) leaves none of its keys when it ends: the claim of its
// first id, which names its second, goes too, and a continuation of that
// id learns that the run ended.
func TestDurableMovedTwiceEnds(t *testing.T) {
	svcs, cs, st := durableServers(t, "a", "b", "c")
	src := "w = get_weather('Paris')\nv = get_weather('Rome')\nu = get_weather('Oslo')\n[w, v, u]"
	status, out := cs[0].runWith("/v1/run", run{"source": src, "tools": []any{weather}})
	ids := []string{out.RunID}
	for i := range 2 {
		svcs[i].Drain()
		if err := svcs[i].Wait(t.Context()); err != nil {
			t.Fatal(err)
		}
		status, out = cs[i+1].results(out.RunID, value(out.Pending[0].ID, "sunny"))
		if status != http.StatusOK || out.Status != "tool_calls" {
			t.Fatalf("taken over by replica %d: %d %s (error %+v)", i+1, status, out.Status, out.Error)
		}
		ids = append(ids, out.RunID)
	}
	if status, out = cs[2].results(out.RunID, value(out.Pending[0].ID, "sunny")); status != http.StatusOK || out.Status != "done" {
		t.Fatalf("the end: %d %s (error %+v)", status, out.Status, out.Error)
	}
	runs := sessionstore.Runs(st)
	for _, id := range ids {
		sum := sha256.Sum256([]byte(id))
		if meta, err := runs.Head(t.Context(), hex.EncodeToString(sum[:])); err != nil || !meta.Deleted {
			t.Errorf("run %s's key after the end: %+v %v, want a tombstone", id, meta, err)
		}
	}
	if status, out = cs[2].results(ids[0], value("call_1", "sunny")); status != http.StatusNotFound {
		t.Fatalf("a continuation of the first id after the end: %d (error %+v), want 404", status, out.Error)
	}
}

// TestDurableCut: a continuation in flight when its replica's grace runs
// out (Cut) is answered 503 closed, and the run is kept in the store:
// a continuation sent to another replica continues it from its pause.
func TestDurableCut(t *testing.T) {
	svcs, cs, _ := durableServers(t, "a", "b")
	for len(tools.Gate.Entered) > 0 {
		<-tools.Gate.Entered
	}
	source := "a = get_weather('Paris')\ngate(wait=False)\nwhile a == 'Oslo':\n    pass\nb = get_weather(a)\n[a, b]"
	status, out := cs[0].runWith("/v1/run", run{"source": source, "tools": []any{weather}})
	paused(t, status, out, `get_weather{"city":"Paris"}`)
	runID, first := out.RunID, out.Pending[0].ID
	answered := make(chan service.Response, 1)
	go func() {
		status, out := cs[0].results(runID, value(first, "Oslo"))
		if status != http.StatusServiceUnavailable || out.Error == nil || out.Error.Kind != "closed" {
			t.Errorf("the continuation cut: %d %+v, want 503 closed", status, out.Error)
		}
		answered <- out
	}()
	<-tools.Gate.Entered // a runs on past the pause, in its loop
	svcs[0].Drain()
	svcs[0].Cut()
	<-answered
	// Another value, which ends the loop: the store checks the results' ids.
	status, out = cs[1].results(runID, value(first, "Rome"))
	paused(t, status, out, `get_weather{"city":"Rome"}`)
	<-tools.Gate.Entered // b's
	status, out = cs[1].results(out.RunID, value(out.Pending[0].ID, "fog"))
	if status != http.StatusOK || string(out.Value) != `["Rome","fog"]` || !strings.HasPrefix(out.RunID, "run_b.") {
		t.Fatalf("end: %d %s as %s %+v", status, out.Value, out.RunID, out.Error)
	}
}
