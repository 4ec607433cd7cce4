package service_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/spine-run/spine/fleet"
	"github.com/spine-run/spine/service"
	"github.com/spine-run/spine/sessionstore"
)

// sessionProgram is durableProgram in a session: it reads x and random's
// state, which the session's first run left, and leaves y.
func sessionProgram(key string) string {
	return "r = random.random()\na = get_weather('Paris')\n" +
		"try:\n    lookup(key='" + key + "')\nexcept RuntimeError:\n    pass\n" +
		"print('between', r)\nb = get_weather(city=a['next'])\ny = [x, a['next'], b, r]\ny"
}

// generation is the generation of session id in st.
func generation(t *testing.T, st sessionstore.Store, id string) uint64 {
	t.Helper()
	meta, err := st.Head(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return meta.Generation
}

// sessionRun runs source with the client tool get_weather in session id.
func (c client) sessionRun(id, source string) (int, service.Response) {
	c.t.Helper()
	return c.runWith("/v1/sessions/"+id+"/run", run{"source": source, "tools": []any{weather}})
}

// TestDurableSessionRun: under the write policy run, a session's run
// paused on a replica that drains and closes is continued by another from
// the store: the session at the generation its run started from, the run
// from its record, no call asked or made twice, the same outcome as a run
// that did not move; the drained replica wrote nothing of the run, and the
// session goes on from the run's end on the new replica.
func TestDurableSessionRun(t *testing.T) {
	svcs, cs, st := durableServers(t, "a", "b")
	a, b := cs[0], cs[1]
	lookupsOf("")
	first := "import random\nrandom.seed(7)\nx = 41"

	// Unmoved, on b: what the run answers.
	still := b.create()
	b.mustRun(still, first)
	status, out := b.sessionRun(still, sessionProgram("session-0"))
	paused(t, status, out, `get_weather{"city":"Paris"}`)
	status, out = b.results(out.RunID, value(out.Pending[0].ID, map[string]any{"next": "Oslo"}))
	paused(t, status, out, `get_weather{"city":"Oslo"}`)
	status, want := b.results(out.RunID, value(out.Pending[0].ID, "snow"))
	if status != http.StatusOK || want.Error != nil || !strings.HasPrefix(string(want.Value), `[41,"Oslo","snow",`) {
		t.Fatalf("unmoved: %d %s %+v", status, want.Value, want.Error)
	}
	lookupsOf("")

	// Moved: paused on a, which drains and closes; b continues it.
	id := a.create()
	a.mustRun(id, first)
	before := generation(t, st, id)
	status, out = a.sessionRun(id, sessionProgram("session-1"))
	paused(t, status, out, `get_weather{"city":"Paris"}`)
	runID, call := out.RunID, out.Pending[0].ID
	svcs[0].Drain()
	if err := svcs[0].Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := svcs[0].Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if gen := generation(t, st, id); gen != before {
		t.Fatalf("the drained replica wrote the session mid-run: generation %d, %d before the run", gen, before)
	}
	status, out = b.results(runID, value(call, map[string]any{"next": "Oslo"}))
	paused(t, status, out, `get_weather{"city":"Oslo"}`)
	if !strings.HasPrefix(out.RunID, "run_b.") || !strings.HasPrefix(out.Stdout, "between ") || lookupsOf("session-1") != 1 {
		t.Fatalf("continued on b as %s, stdout %q", out.RunID, out.Stdout)
	}
	status, got := b.results(out.RunID, value(out.Pending[0].ID, "snow"))
	if status != http.StatusOK || got.Status != "done" || got.Error != nil || lookupsOf("session-1") != 0 {
		t.Fatalf("end: %d %s %+v", status, got.Value, got.Error)
	}
	if string(got.Value) != string(want.Value) || got.Stdout != want.Stdout {
		t.Fatalf("moved: %s %q; unmoved: %s %q", got.Value, got.Stdout, want.Value, want.Stdout)
	}
	if gen := generation(t, st, id); gen != before+1 {
		t.Fatalf("generation %d after the run, want %d", gen, before+1)
	}
	if v := b.mustRun(id, "y[:3]"); v != `[41,"Oslo","snow"]` {
		t.Fatalf("the session after the run: %s", v)
	}
}

// TestDurableSessionMovedOn: a session's paused run whose session was
// written since it started (another run in it, on another replica, once
// its replica handed the run off) is refused 409 when continued, and once
// the session is deleted 404, its tools not called.
func TestDurableSessionMovedOn(t *testing.T) {
	svcs, cs, _ := durableServers(t, "a", "b")
	a, b := cs[0], cs[1]
	lookupsOf("")
	id := a.create()
	a.mustRun(id, "import random\nx = 1")
	status, out := a.sessionRun(id, sessionProgram("session-2"))
	paused(t, status, out, `get_weather{"city":"Paris"}`)
	runID, call := out.RunID, out.Pending[0].ID
	svcs[0].Drain()
	if err := svcs[0].Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
	b.mustRun(id, "x = 2")
	status, out = b.results(runID, value(call, map[string]any{"next": "Oslo"}))
	if status != http.StatusConflict || out.Error == nil || !strings.Contains(out.Error.Message, "moved on") || lookupsOf("session-2") != 0 {
		t.Fatalf("a continuation after the session moved on: %d %+v", status, out.Error)
	}
	if v := b.mustRun(id, "x"); v != "2" {
		t.Fatalf("the session after the refusal: %s", v)
	}
	// Deleted: the run is refused 404, naming its session.
	if status, raw, _ := b.send("DELETE", "/v1/sessions/"+id, "", nil); status != http.StatusNoContent && status != http.StatusOK {
		t.Fatalf("DELETE: %d %s", status, raw)
	}
	status, out = b.results(runID, value(call, map[string]any{"next": "Oslo"}))
	if status != http.StatusNotFound || out.Error == nil || !strings.Contains(out.Error.Message, "its session "+id+": it is gone") || lookupsOf("session-2") != 0 {
		t.Fatalf("a continuation after the session was deleted: %d %+v", status, out.Error)
	}
}

// TestDurableSessionTakenOver: a session's run taken over while its
// replica still holds it (as from one that died) continues on the other;
// the holder then answers 409 and serves the session from the store, never
// from the run's half (r, which the run set before its pause, is not
// there), and the two runs' writes meet in the store: the first wins, the
// other is answered 409.
func TestDurableSessionTakenOver(t *testing.T) {
	_, cs, _ := durableServers(t, "a", "b")
	a, b := cs[0], cs[1]
	lookupsOf("")
	id := a.create()
	a.mustRun(id, "import random\nx = 1")
	status, out := a.sessionRun(id, sessionProgram("session-3"))
	paused(t, status, out, `get_weather{"city":"Paris"}`)
	runID, call := out.RunID, out.Pending[0].ID
	status, out = b.results(runID, value(call, map[string]any{"next": "Oslo"}))
	paused(t, status, out, `get_weather{"city":"Oslo"}`)
	moved, second := out.RunID, out.Pending[0].ID
	status, out = a.results(runID, value(call, map[string]any{"next": "Oslo"}))
	if status != http.StatusConflict || out.Error == nil || out.Error.Kind != "conflict" {
		t.Fatalf("the holder, once b took its run over: %d %+v", status, out.Error)
	}
	if v := a.mustRun(id, "'r' in globals()"); v != "false" {
		t.Fatalf("the holder's session after the takeover: r defined: %s", v)
	}
	status, out = b.results(moved, value(second, "snow"))
	if status != http.StatusConflict || out.Error == nil || out.Error.Kind != "conflict" || lookupsOf("session-3") != 1 {
		t.Fatalf("the moved run's end, after a run on the holder: %d %s %+v", status, out.Value, out.Error)
	}
	if v := b.mustRun(id, "'r' in globals(), x"); v != "[false,1]" {
		t.Fatalf("the session: %s", v)
	}
}

// TestDurableSessionApproval: a session's run waiting for a decision
// (no client tools) on a server that stops is continued by the replica's
// next process: the session at the generation the run started from, the
// refused call not made, and the session goes on from the run's end.
func TestDurableSessionApproval(t *testing.T) {
	tl, _, st, start := askingReplicas(t)
	svcA, a := start("a")
	id := a.create()
	a.mustRun(id, "n = 3")
	before := generation(t, st, id)
	status, out := a.runWith("/v1/sessions/"+id+"/run", run{"source": "print('asking', n)\ntry:\n    lookup(key='pen')\nexcept PermissionError as e:\n    r = str(e)\nr"})
	approvalPause(t, status, out, `lookup{"key":"pen"}`)
	runID := out.RunID
	if err := svcA.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if gen := generation(t, st, id); gen != before {
		t.Fatalf("the stopped replica wrote the session mid-run: generation %d, %d before the run", gen, before)
	}
	_, a = start("a")
	status, out = a.decide(runID, allow("approval_1", false, "no pens today"))
	if status != http.StatusOK || out.Status != "done" || string(out.Value) != `"no pens today"` || out.Stdout != "asking 3\n" {
		t.Fatalf("the refusal on a's next process: %d %s %s stdout %q (error %+v)", status, out.Status, out.Value, out.Stdout, out.Error)
	}
	if n := lookupsIn(tl)["pen"]; n != 0 {
		t.Fatalf("lookups of pen: %d, want 0 (refused)", n)
	}
	if v := a.mustRun(id, "[n, r]"); v != `[3,"no pens today"]` || generation(t, st, id) != before+2 {
		t.Fatalf("the session after the run: %s, generation %d", v, generation(t, st, id))
	}
}

// TestDurableSessionAnswerPolicy: under the write policy answer a
// session's paused run is not kept in the store (it may hold an older
// state than the run started from): it lives on its replica, and a
// continuation reaching another is answered 421.
func TestDurableSessionAnswerPolicy(t *testing.T) {
	st, err := sessionstore.Open(context.Background(), "mem://")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	var cs []client
	for _, name := range []string{"a", "b"} {
		_, ts := newSessionServer(t, nil, &service.Options{Replica: name, SessionStore: st, SessionWrite: fleet.WriteAnswer})
		cs = append(cs, client{t: t, url: ts.URL})
	}
	a, b := cs[0], cs[1]
	id := a.create()
	a.mustRun(id, "import random\nx = 1")
	status, out := a.sessionRun(id, sessionProgram("session-4"))
	paused(t, status, out, `get_weather{"city":"Paris"}`)
	runID, call := out.RunID, out.Pending[0].ID
	status, out = b.results(runID, value(call, map[string]any{"next": "Oslo"}))
	if status != http.StatusMisdirectedRequest || out.Error == nil || out.Error.Kind != "run_elsewhere" {
		t.Fatalf("a continuation reaching b: %d %+v, want 421 run_elsewhere", status, out.Error)
	}
	status, out = a.results(runID, value(call, map[string]any{"next": "Oslo"}))
	paused(t, status, out, `get_weather{"city":"Oslo"}`)
	lookupsOf("session-4")
}
