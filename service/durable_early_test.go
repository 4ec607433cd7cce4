package service_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/internal/spinetest"
	"github.com/spine-run/spine/service"
	"github.com/spine-run/spine/sessionstore"
)

// durableEarlyProgram reads prices of a read-only client tool with early
// reads: a loop asked together, a call of the server's tool lookup (key),
// a loop on the first loop's values, and a read the program needs only at
// its end (prepared at its start, answered at the first pause, claimed
// after the second).
func durableEarlyProgram(key string) string {
	return "firsts = []\nfor item in ['a', 'b', 'c']:\n    firsts.append(shop.price(item))\n" +
		"try:\n    lookup(key='" + key + "')\nexcept RuntimeError:\n    pass\n" +
		"print('between', firsts)\nseconds = []\nfor p in firsts:\n    seconds.append(shop.price(str(p)))\n" +
		"last = shop.price('z')\n[firsts, seconds, last]"
}

// priceOf answers a pending call of shop.price: a, b, c and z by their
// place in the alphabet, a number n by 100 + n.
func priceOf(t *testing.T, p service.PendingCall) any {
	var args struct{ Item string }
	if err := json.Unmarshal(p.Arguments, &args); err != nil || args.Item == "" {
		t.Fatalf("a pending call %s(%s)", p.Name, p.Arguments)
	}
	if n, err := strconv.Atoi(args.Item); err == nil {
		return 100 + n
	}
	return int(args.Item[0]-'a') + 1
}

// answerAll answers every call of a pause.
func answerAll(t *testing.T, out service.Response) []any {
	var results []any
	for _, p := range out.Pending {
		results = append(results, value(p.ID, priceOf(t, p)))
	}
	return results
}

// pauseOf is a pause's pending calls as id name(arguments).
func pauseOf(out service.Response) string {
	var calls []string
	for _, p := range out.Pending {
		calls = append(calls, fmt.Sprintf("%s %s%s", p.ID, p.Name, p.Arguments))
	}
	return strings.Join(calls, ", ")
}

// TestDurableEarlyReads: a run with early reads kept in the store, whose
// pauses list several reads asked together, is continued by another
// replica when its own drains (at its first pause) or stops (at its
// second), and moved twice: the continuation reaches the stored pause, with the ids its
// caller holds, and goes on to the pauses and the end of the run that did
// not move; no call is asked twice, and the server's tool is called once.
func TestDurableEarlyReads(t *testing.T) {
	svcs, cs, _ := durableServers(t, "a", "b", "c", "d", "e", "f")
	lookupsOf("")

	// Uninterrupted, on c.
	var want []string
	status, out := cs[2].runWith("/v1/run", run{"source": durableEarlyProgram("early-0"), "tools": []any{price}, "early_reads": true})
	for status == http.StatusOK && out.Status == "tool_calls" {
		want = append(want, pauseOf(out))
		status, out = cs[2].results(out.RunID, answerAll(t, out)...)
	}
	if status != http.StatusOK || len(want) != 2 || strings.Count(want[0], "shop.price") < 3 || lookupsOf("early-0") != 1 {
		t.Fatalf("uninterrupted: %d %s pauses %q (error %+v)", status, out.Value, want, out.Error)
	}
	end := string(out.Value)

	for _, at := range []int{1, 2} {
		key := fmt.Sprintf("early-%d", at)
		first := 0 // a drains at the first pause; d stops at the second
		if at == 2 {
			first = 3
		}
		status, out := cs[first].runWith("/v1/run", run{"source": durableEarlyProgram(key), "tools": []any{price}, "early_reads": true})
		var got []string
		for i := 1; status == http.StatusOK && out.Status == "tool_calls"; i++ {
			got = append(got, pauseOf(out))
			runID, results := out.RunID, answerAll(t, out)
			on := cs[1]
			switch {
			case i < at:
				on = cs[first]
			case i == at && at == 1:
				svcs[first].Drain() // the drain hands the paused run off
				if err := svcs[first].Wait(t.Context()); err != nil {
					t.Fatal(err)
				}
			case i == at:
				if err := svcs[first].Close(t.Context()); err != nil {
					t.Fatal(err)
				}
			}
			status, out = on.results(runID, results...)
		}
		if status != http.StatusOK || string(out.Value) != end || fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("moved at pause %d: %d %s, pauses %q, want %s and %q (error %+v)", at, status, out.Value, got, end, want, out.Error)
		}
		if n := lookupsOf(key); n != 1 {
			t.Fatalf("moved at pause %d: lookup called %d times", at, n)
		}
	}

	// Moved twice: e drains at the first pause, f, which continued it,
	// stops at the second, and b continues it from f's record.
	status, out = cs[4].runWith("/v1/run", run{"source": durableEarlyProgram("early-3"), "tools": []any{price}, "early_reads": true})
	var got []string
	for i, on := range []int{5, 1} {
		if status != http.StatusOK || out.Status != "tool_calls" {
			break
		}
		got = append(got, pauseOf(out))
		runID, results := out.RunID, answerAll(t, out)
		if i == 0 {
			svcs[4].Drain()
			if err := svcs[4].Wait(t.Context()); err != nil {
				t.Fatal(err)
			}
		} else if err := svcs[5].Close(t.Context()); err != nil {
			t.Fatal(err)
		}
		status, out = cs[on].results(runID, results...)
		if i == 0 && !strings.HasPrefix(out.RunID, "run_f.") {
			t.Fatalf("continued as %s", out.RunID)
		}
	}
	if status != http.StatusOK || string(out.Value) != end || fmt.Sprint(got) != fmt.Sprint(want) || lookupsOf("early-3") != 1 {
		t.Fatalf("moved twice: %d %s, pauses %q, want %s and %q (error %+v)", status, out.Value, got, end, want, out.Error)
	}
}

// TestDurableAnsweredUnfinished: a read the caller answered at an earlier
// pause whose Call had not returned when the run paused again is on the
// record without its response; the store keeps the result it had
// ("answered"), and a continuation answers the read from there when it
// takes it up, asking the caller nothing. (The store is edited here to
// what a run that paused in that instant writes, unless it did so.)
func TestDurableAnsweredUnfinished(t *testing.T) {
	_, cs, st := durableServers(t, "a", "b")
	status, out := cs[0].runWith("/v1/run", run{"source": durableEarlyProgram("early-u"), "tools": []any{price}, "early_reads": true})
	zID := ""
	for _, p := range out.Pending {
		if string(p.Arguments) == `{"item":"z"}` {
			zID = p.ID
		}
	}
	if zID == "" {
		t.Fatalf("the first pause: %d %s", status, pauseOf(out))
	}
	status, out = cs[0].results(out.RunID, answerAll(t, out)...)
	second := pauseOf(out)
	runs := sessionstore.Runs(st)
	sum := sha256.Sum256([]byte(out.RunID))
	key := hex.EncodeToString(sum[:])
	r, meta, err := runs.Get(t.Context(), key, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	var stored map[string]json.RawMessage
	err = json.NewDecoder(r).Decode(&stored)
	r.Close()
	if err != nil {
		t.Fatal(err)
	}
	var data []byte
	if err := json.Unmarshal(stored["run"], &data); err != nil {
		t.Fatal(err)
	}
	rec, err := spine.ParseRecord(data)
	if err != nil {
		t.Fatal(err)
	}
	edit, raced := false, false
	for i, p := range rec.Waiting.Pending {
		if p.Tool == "shop.price" && string(p.Args) == `{"item":"z"}` {
			// z's Call may not have returned when the run paused (then the
			// store has its result already): else make it so.
			raced, edit = p.Response == nil, p.Response != nil
			rec.Waiting.Pending[i].Response = nil
		}
	}
	if raced != strings.Contains(string(stored["answered"]), zID) || !raced && !edit {
		t.Fatalf("the stored wait: %+v, answered %s", rec.Waiting, stored["answered"])
	}
	if edit {
		if data, err = rec.Encode(); err != nil {
			t.Fatal(err)
		}
		stored["run"], _ = json.Marshal(data)
		stored["answered"], _ = json.Marshal([]any{value(zID, 26)})
		edited, _ := json.Marshal(stored)
		meta.Generation++
		if err := runs.Put(t.Context(), key, meta, 1<<30, func(w io.Writer) error { _, err := w.Write(edited); return err }); err != nil {
			t.Fatal(err)
		}
	}
	status, out = cs[1].results(out.RunID, answerAll(t, out)...)
	if status != http.StatusOK || string(out.Value) != `[[1,2,3],[101,102,103],26]` {
		t.Fatalf("continued at %s: %d %s %s %s %s (error %+v)", second, status, out.Status, out.RunID, out.Value, pauseOf(out), out.Error)
	}
}

// TestDurableWaitRefusedLeavesRun: a replica whose Runner could not have
// written the stored record's wait (fewer pending early reads allowed, as
// after a rollout that changed it) refuses the take-over before its
// claim, leaving the stored run for a replica that can continue it.
func TestDurableWaitRefusedLeavesRun(t *testing.T) {
	st, err := sessionstore.Open(t.Context(), "mem://")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	start := func(name string, opts *spine.Options) (*service.Server, client) {
		r := spinetest.NewRunner(t, spinetest.NewTools().Manifest(), opts)
		svc, ts := newSessionServer(t, r, &service.Options{Replica: name, SessionStore: st})
		return svc, client{t: t, url: ts.URL}
	}
	svcA, a := start("a", &spine.Options{PoolSize: -1})
	_, b := start("b", &spine.Options{PoolSize: -1, MaxPendingEarlyReads: 1})
	_, c := start("c", &spine.Options{PoolSize: -1})
	status, out := a.runWith("/v1/run", run{"source": durableEarlyProgram("refused"), "tools": []any{price}, "early_reads": true})
	if status != http.StatusOK || len(out.Pending) < 3 {
		t.Fatalf("the first pause: %d %s", status, pauseOf(out))
	}
	runID, results := out.RunID, answerAll(t, out)
	svcA.Drain()
	if err := svcA.Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
	if status, out = b.results(runID, results...); status != http.StatusInternalServerError || out.Error == nil || out.Error.Kind != "run_diverged" {
		t.Fatalf("the results on b: %d %s (error %+v), want 500 run_diverged", status, out.Status, out.Error)
	}
	status, out = c.results(runID, results...)
	if status != http.StatusOK || out.Status != "tool_calls" || !strings.HasPrefix(out.RunID, "run_c.") {
		t.Fatalf("the results on c: %d %s as %s (error %+v)", status, out.Status, out.RunID, out.Error)
	}
}
