package service_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/internal/spinetest"
	"github.com/spine-run/spine/service"
	"github.com/spine-run/spine/sessionstore"
)

// askingReplicas are replicas sharing a store and a Runner whose Approve
// defers every call of lookup to a person; it returns the Runner's tools,
// how many times Approve was asked about lookup(key=book), the store, and
// a function that starts replica name (again: a restart).
func askingReplicas(t *testing.T) (*spinetest.Tools, *atomic.Int64, sessionstore.Store, func(name string) (*service.Server, client)) {
	t.Helper()
	st, err := sessionstore.Open(context.Background(), "mem://")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	tl := spinetest.NewTools()
	var books atomic.Int64
	r := spinetest.NewRunner(t, tl.Manifest(), &spine.Options{PoolSize: -1,
		Approve: func(ctx context.Context, tool string, args json.RawMessage, early bool) error {
			if tool != "lookup" {
				return nil
			}
			if string(args) == `{"key":"book"}` {
				books.Add(1)
			}
			return fmt.Errorf("prices are secret: %w", spine.ErrAsk)
		}})
	return tl, &books, st, func(name string) (*service.Server, client) {
		svc, ts := newSessionServer(t, r, &service.Options{Replica: name, SessionStore: st})
		return svc, client{t: t, url: ts.URL}
	}
}

// lookupsIn counts the lookups of each key tl saw since the last count.
func lookupsIn(tl *spinetest.Tools) map[string]int {
	n := map[string]int{}
	for {
		select {
		case k := <-tl.Lookups:
			n[k]++
		default:
			return n
		}
	}
}

// TestDurableApproval: with a store, a run waiting for its caller's
// decision is kept there as at a client tool's pause. A run with client
// tools whose replica drains is handed off (the drain does not wait for
// it), and the decision sent to another replica continues it there: the
// call is made once, live. A run without client tools whose server stops
// is continued by the replica's next process, where a refusal raises
// PermissionError, the tool not called.
func TestDurableApproval(t *testing.T) {
	tl, _, _, start := askingReplicas(t)
	svcA, a := start("a")
	_, b := start("b")

	status, out := a.runWith("/v1/run", run{"source": "w = get_weather('Paris')\nprice = lookup(key='book')\n[w, price]", "tools": []any{weather}})
	paused(t, status, out, `get_weather{"city":"Paris"}`)
	runID := out.RunID
	status, out = a.results(runID, value(out.Pending[0].ID, "sunny"))
	id := approvalPause(t, status, out, `lookup{"key":"book"}`)
	svcA.Drain()
	if status, out = a.decide(runID, allow(id, true, "")); status != http.StatusServiceUnavailable {
		t.Fatalf("a decision reaching the drained replica: %d %s %+v, want 503 (the run handed off)", status, out.Status, out.Error)
	}
	if err := svcA.Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
	status, out = b.decide(runID, allow(id, true, ""))
	if status != http.StatusOK || out.Status != "done" || string(out.Value) != `["sunny",21]` || !strings.HasPrefix(out.RunID, "run_b.") {
		t.Fatalf("the decision on b: %d %s %s as %s (error %+v)", status, out.Status, out.Value, out.RunID, out.Error)
	}
	if n := lookupsIn(tl)["book"]; n != 1 {
		t.Fatalf("lookups of book: %d, want 1", n)
	}
	if status, out = b.decide(runID, allow(id, true, "")); status != http.StatusNotFound {
		t.Fatalf("the decision again, after the end: %d %+v", status, out.Error)
	}

	// No client tools; the server stops, and starts again.
	svcB, b := start("b")
	status, out = b.runWith("/v1/run", run{"source": "print('asking')\ntry:\n    lookup(key='pen')\nexcept PermissionError as e:\n    r = str(e)\nr"})
	approvalPause(t, status, out, `lookup{"key":"pen"}`)
	runID = out.RunID
	if err := svcB.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	_, b = start("b")
	status, out = b.decide(runID, allow("approval_1", false, "no pens today"))
	if status != http.StatusOK || out.Status != "done" || string(out.Value) != `"no pens today"` || out.Stdout != "asking\n" {
		t.Fatalf("the refusal on b's next process: %d %s %s stdout %q (error %+v)", status, out.Status, out.Value, out.Stdout, out.Error)
	}
	if n := lookupsIn(tl)["pen"]; n != 0 {
		t.Fatalf("lookups of pen: %d, want 0 (refused)", n)
	}
}

// TestDurableApprovedReplay: a run taken over after a call its caller
// allowed replays that call from its record: Approve is not asked about it
// again, nor is the tool called again. Its next approval is numbered after
// it (approval_2), is kept in the store too, and continues on a third
// replica.
func TestDurableApprovedReplay(t *testing.T) {
	tl, books, _, start := askingReplicas(t)
	svcA, a := start("a")
	svcB, b := start("b")
	_, c := start("c")

	status, out := a.runWith("/v1/run", run{"source": "p = lookup(key='book')\nw = get_weather('Paris')\nq = lookup(key='pen')\n[p, w, q]", "tools": []any{weather}})
	id := approvalPause(t, status, out, `lookup{"key":"book"}`)
	runID := out.RunID
	status, out = a.decide(runID, allow(id, true, ""))
	paused(t, status, out, `get_weather{"city":"Paris"}`)
	if err := svcA.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	status, out = b.results(runID, value(out.Pending[0].ID, "fog"))
	id = approvalPause(t, status, out, `lookup{"key":"pen"}`)
	if id != "approval_2" {
		t.Fatalf("the run's second approval on b is %q, want approval_2", id)
	}
	if n, asked := lookupsIn(tl)["book"], books.Load(); n != 1 || asked != 1 {
		t.Fatalf("lookups of book %d, Approve asked about it %d times: want 1 and 1 (the replay answers it)", n, asked)
	}
	runID = out.RunID
	if err := svcB.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	status, out = c.decide(runID, allow(id, true, ""))
	if status != http.StatusOK || out.Status != "done" || string(out.Value) != `[21,"fog",2]` || !strings.HasPrefix(out.RunID, "run_c.") {
		t.Fatalf("the decision on c: %d %s %s as %s (error %+v)", status, out.Status, out.Value, out.RunID, out.Error)
	}
	if n, asked := lookupsIn(tl), books.Load(); n["book"] != 0 || n["pen"] != 1 || asked != 1 {
		t.Fatalf("lookups %v, Approve asked about book %d times: want pen once, and 1", n, asked)
	}
}

// TestDurableApprovalKind: a stored run waiting for a decision refuses
// results, and one waiting for results refuses a decision (409), leaving
// the run as it was: the right continuation then takes it over (from b,
// which still holds it, as from one that died).
func TestDurableApprovalKind(t *testing.T) {
	_, _, _, start := askingReplicas(t)
	svcA, a := start("a")
	_, b := start("b")
	src := "w = get_weather('Paris')\ntry:\n    p = lookup(key='book')\nexcept PermissionError as e:\n    p = str(e)\n[w, p]"
	status, out := a.runWith("/v1/run", run{"source": src, "tools": []any{weather}})
	paused(t, status, out, `get_weather{"city":"Paris"}`)
	runID, call := out.RunID, out.Pending[0].ID
	if err := svcA.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if status, out = b.decide(runID, allow("approval_1", true, "")); status != http.StatusConflict || !strings.Contains(out.Error.Message, "not for a decision") {
		t.Fatalf("a decision for a run waiting for results: %d %+v", status, out.Error)
	}
	status, out = b.results(runID, value(call, "sunny"))
	id := approvalPause(t, status, out, `lookup{"key":"book"}`)
	_, c := start("c")
	runID = out.RunID
	if status, out = c.results(runID, value("call_2", "x")); status != http.StatusConflict || !strings.Contains(out.Error.Message, "waits for a decision on approval_1") {
		t.Fatalf("results for a stored run waiting for a decision: %d %+v", status, out.Error)
	}
	if status, out = c.decide(runID, allow(id, false, "no")); status != http.StatusOK || string(out.Value) != `["sunny","no"]` {
		t.Fatalf("the decision on c: %d %s %+v", status, out.Value, out.Error)
	}
}

// TestDurableApprovalDiverged: a run taken over at an approval whose
// replay asks another approval than the stored one (here the store was
// edited) stops with run_diverged, the tool not called.
func TestDurableApprovalDiverged(t *testing.T) {
	tl, _, st, start := askingReplicas(t)
	_, a := start("a")
	_, b := start("b")
	status, out := a.runWith("/v1/run", run{"source": "lookup(key='book')"})
	id := approvalPause(t, status, out, `lookup{"key":"book"}`)
	runs := sessionstore.Runs(st)
	sum := sha256.Sum256([]byte(out.RunID))
	key := hex.EncodeToString(sum[:])
	r, meta, err := runs.Get(t.Context(), key, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(r)
	r.Close()
	edited := strings.Replace(string(data), `"arguments":{"key":"book"}`, `"arguments":{"key":"pen"}`, 1)
	meta.Generation++
	if err := runs.Put(t.Context(), key, meta, 1<<30, func(w io.Writer) error { _, err := io.WriteString(w, edited); return err }); err != nil {
		t.Fatal(err)
	}
	status, out = b.decide(out.RunID, allow(id, true, ""))
	if status != http.StatusInternalServerError || out.Error == nil || out.Error.Kind != "run_diverged" ||
		!strings.Contains(out.Error.Message, `it asks approval_1 lookup({"key":"book"}), the stored pause approval_1 lookup({"key":"pen"})`) {
		t.Fatalf("a take-over that does not reach its approval: %d %+v", status, out.Error)
	}
	if n := lookupsIn(tl); len(n) != 0 {
		t.Fatalf("lookups: %v", n)
	}
}

// TestDurableTakenOverAgain: a run taken over whose new replica stops
// before the run's next pause is not lost: the claim names the run's new
// id (a 409 for the old id carries it), and the same results sent to the
// new id take it over again on a third replica, from the same pause.
func TestDurableTakenOverAgain(t *testing.T) {
	svcs, cs, _ := durableServers(t, "a", "b", "c")
	for len(tools.Gate.Entered) > 0 {
		<-tools.Gate.Entered
	}
	status, out := cs[0].runWith("/v1/run", run{"source": "a = get_weather('Paris')\ngate()\nb = get_weather(a)\n[a, b]", "tools": []any{weather}})
	paused(t, status, out, `get_weather{"city":"Paris"}`)
	runID, first := out.RunID, out.Pending[0].ID
	if err := svcs[0].Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	answered := make(chan int, 1)
	go func() {
		status, _ := cs[1].results(runID, value(first, "Oslo"))
		answered <- status
	}()
	<-tools.Gate.Entered // b took it over, applied the results, and runs on
	if err := svcs[1].Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if status := <-answered; status != http.StatusServiceUnavailable {
		t.Fatalf("the continuation b answered as it stopped: %d, want 503", status)
	}
	status, out = cs[2].results(runID, value(first, "Oslo"))
	if status != http.StatusConflict || !strings.HasPrefix(out.RunID, "run_b.") {
		t.Fatalf("the old id after the take-over: %d run_id %q %+v, want 409 naming the new id", status, out.RunID, out.Error)
	}
	go tools.Gate.Let()
	status, out = cs[2].results(out.RunID, value(first, "Oslo"))
	paused(t, status, out, `get_weather{"city":"Oslo"}`)
	<-tools.Gate.Entered // c's: the tests after wait for their own
	status, out = cs[2].results(out.RunID, value(out.Pending[0].ID, "fog"))
	if status != http.StatusOK || string(out.Value) != `["Oslo","fog"]` || !strings.HasPrefix(out.RunID, "run_c.") {
		t.Fatalf("end: %d %s as %s %+v", status, out.Value, out.RunID, out.Error)
	}
}

// TestDurableRefusedLeavesRun: a take-over refused for what the store holds
// (its tools edited to a bad name; its record made by another Guest build,
// as in a rollout) refuses before it claims the run: the stored run keeps
// its generation, for a replica that can continue it.
func TestDurableRefusedLeavesRun(t *testing.T) {
	_, cs, st := durableServers(t, "a", "b")
	runs := sessionstore.Runs(st)
	for _, c := range []struct {
		name, want string
		edit       func(storedRun map[string]any)
	}{
		{"tools", "tools[0]", func(sr map[string]any) { sr["tools"].([]any)[0].(map[string]any)["name"] = "get weather" }},
		{"guest", "another Guest build", func(sr map[string]any) {
			rec, err := spine.ParseRecord(decodeBytes(t, sr["run"]))
			if err != nil {
				t.Fatal(err)
			}
			rec.Guest.Artifact = "another"
			if sr["run"], err = rec.Encode(); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		status, out := cs[0].runWith("/v1/run", run{"source": "get_weather('Paris')", "tools": []any{weather}})
		paused(t, status, out, `get_weather{"city":"Paris"}`)
		sum := sha256.Sum256([]byte(out.RunID))
		key := hex.EncodeToString(sum[:])
		r, meta, err := runs.Get(t.Context(), key, 1<<30)
		if err != nil {
			t.Fatal(err)
		}
		var sr map[string]any
		err = json.NewDecoder(r).Decode(&sr)
		r.Close()
		if err != nil {
			t.Fatal(err)
		}
		c.edit(sr)
		edited, _ := json.Marshal(sr)
		meta.Generation++
		if err := runs.Put(t.Context(), key, meta, 1<<30, func(w io.Writer) error { _, err := w.Write(edited); return err }); err != nil {
			t.Fatal(err)
		}
		status, out = cs[1].results(out.RunID, value(out.Pending[0].ID, "fog"))
		if status != http.StatusInternalServerError || !strings.Contains(out.Error.Message, c.want) {
			t.Fatalf("%s: a take-over of a run the store holds so: %d %+v", c.name, status, out.Error)
		}
		if after, err := runs.Head(t.Context(), key); err != nil || after.Generation != meta.Generation {
			t.Fatalf("%s: the stored run after the refusal: generation %d (%v), want %d (no claim)", c.name, after.Generation, err, meta.Generation)
		}
	}
}

// decodeBytes is v, a []byte as encoding/json writes it (base64).
func decodeBytes(t *testing.T, v any) []byte {
	t.Helper()
	var b []byte
	raw, _ := json.Marshal(v)
	if err := json.Unmarshal(raw, &b); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestDurableApprovalEarlyReads: a run with early reads whose read-only
// client tool is asked in a loop (one pause lists both reads), then waits
// for a decision, is taken over at the approval: its reads are answered
// from the record, not asked again, and the decided call is made once.
func TestDurableApprovalEarlyReads(t *testing.T) {
	tl, _, _, start := askingReplicas(t)
	svcA, a := start("a")
	_, b := start("b")
	src := "ps = [shop.price(item=i) for i in ['pen', 'ink']]\nbook = lookup(key='book')\n[ps, book]"
	status, out := a.runWith("/v1/run", run{"source": src, "tools": []any{price}, "early_reads": true})
	paused(t, status, out, `shop.price{"item":"pen"}`, `shop.price{"item":"ink"}`)
	runID := out.RunID
	status, out = a.results(runID, value(out.Pending[0].ID, 2), value(out.Pending[1].ID, 3))
	id := approvalPause(t, status, out, `lookup{"key":"book"}`)
	svcA.Drain()
	if err := svcA.Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
	status, out = b.decide(runID, allow(id, true, ""))
	if status != http.StatusOK || out.Status != "done" || string(out.Value) != `[[2,3],21]` || !strings.HasPrefix(out.RunID, "run_b.") {
		t.Fatalf("the decision on b: %d %s %s as %s (error %+v, pending %+v)", status, out.Status, out.Value, out.RunID, out.Error, out.Pending)
	}
	if n := lookupsIn(tl)["book"]; n != 1 {
		t.Fatalf("lookups of book: %d, want 1", n)
	}
}

// TestDurableApprovalUnclaimedRead: a run that waits for a decision while
// a read it started early is answered and not yet claimed (prepared at
// the program's start, claimed after the approval) is not taken over from
// a record that cannot hold that read: a continuation from it would ask
// the read again. The decision reaching another replica is refused, the
// stored pause left as it was; its own replica continues the run, the read
// asked once.
func TestDurableApprovalUnclaimedRead(t *testing.T) {
	_, _, _, start := askingReplicas(t)
	_, a := start("a")
	_, b := start("b")
	src := "def ask():\n    return lookup(key='book')\np = shop.price('a')\nbook = ask()\nlast = shop.price('z')\n[p, book, last]"
	status, out := a.runWith("/v1/run", run{"source": src, "tools": []any{price}, "early_reads": true})
	paused(t, status, out, `shop.price{"item":"a"}`, `shop.price{"item":"z"}`)
	runID := out.RunID
	status, out = a.results(runID, answerAll(t, out)...)
	id := approvalPause(t, status, out, `lookup{"key":"book"}`)
	if status, out = b.decide(runID, allow(id, true, "")); status != http.StatusConflict {
		t.Fatalf("the decision on b: %d %s pending %s (error %+v), want 409: the read answered on a would be asked again", status, out.Status, pauseOf(out), out.Error)
	}
	status, out = a.decide(runID, allow(id, true, ""))
	if status != http.StatusOK || out.Status != "done" || string(out.Value) != `[1,21,26]` {
		t.Fatalf("the decision on a: %d %s %s pending %s (error %+v)", status, out.Status, out.Value, pauseOf(out), out.Error)
	}
}

// TestDurableApprovalAfterRefusal: a run whose call of a client tool
// Approve refused, taken over at a later approval, pauses for its next
// client call on the new replica: the refused call, replayed from the
// record, is not counted among the calls of its tools that started.
func TestDurableApprovalAfterRefusal(t *testing.T) {
	st, err := sessionstore.Open(context.Background(), "mem://")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	r := spinetest.NewRunner(t, spinetest.NewTools().Manifest(), &spine.Options{PoolSize: -1,
		Approve: func(ctx context.Context, tool string, args json.RawMessage, early bool) error {
			switch {
			case tool == "lookup":
				return fmt.Errorf("prices are secret: %w", spine.ErrAsk)
			case strings.Contains(string(args), "Rome"):
				return fmt.Errorf("not Rome")
			}
			return nil
		}})
	start := func(name string) (*service.Server, client) {
		svc, ts := newSessionServer(t, r, &service.Options{Replica: name, SessionStore: st})
		return svc, client{t: t, url: ts.URL}
	}
	svcA, a := start("a")
	_, b := start("b")
	src := "try:\n    get_weather('Rome')\nexcept PermissionError as e:\n    r = str(e)\nbook = lookup(key='book')\nw = get_weather('Paris')\n[r, book, w]"
	status, out := a.runWith("/v1/run", run{"source": src, "tools": []any{weather}})
	id := approvalPause(t, status, out, `lookup{"key":"book"}`)
	runID := out.RunID
	svcA.Drain()
	if err := svcA.Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
	status, out = b.decide(runID, allow(id, true, ""))
	paused(t, status, out, `get_weather{"city":"Paris"}`)
	status, out = b.results(out.RunID, value(out.Pending[0].ID, "sunny"))
	if status != http.StatusOK || string(out.Value) != `["not Rome",21,"sunny"]` {
		t.Fatalf("the end on b: %d %s %s (error %+v)", status, out.Status, out.Value, out.Error)
	}
}
