package service_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/spine-run/spine/service"
)

// eventsContinue posts results to run runID on c's server asking for
// events: a replica that takes the run over answers with its events.
func (c client) eventsContinue(runID string, results ...any) <-chan event {
	c.t.Helper()
	return c.eventsPost("/v1/runs/"+runID+"/tool_results", run{"results": results})
}

// eventsPost posts body to path on c's server asking for events.
func (c client) eventsPost(path string, body run) <-chan event {
	c.t.Helper()
	data, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(c.t.Context(), "POST", c.url+path, strings.NewReader(string(data)))
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	return eventsOf(c.t, req)
}

// TestDurableEvents: with a store, a run answered as events is kept at
// each pause as one answered as JSON, and its tool_call event comes once
// the store has the pause. Its replica drains: the stream ends with 503
// closed, and the results sent to another replica, asking for events, are
// answered with the run's events from its pause on (not the output before
// it), under the new run id. A third replica takes it over again from its
// next pause while the second still holds it (as one that died would), and
// its next results, sent to that replica, are accepted (202) and its events
// come on that stream. The server's tool between the pauses is called once.
func TestDurableEvents(t *testing.T) {
	svcs, cs, _ := durableServers(t, "a", "b", "c")
	a, b, c := cs[0], cs[1], cs[2]
	lookupsOf("")
	source := "print('one')\na = get_weather('Paris')\ntry:\n    lookup(key='durable-ev')\nexcept RuntimeError:\n    pass\n" +
		"print('two', a)\nb = get_weather(a)\nprint('three')\nc = get_weather(b)\n[a, b, c]"
	ch := a.runEvents(t.Context(), "/v1/run", run{"source": source, "tools": []any{weather}})
	e, stdout := upTo(t, ch, "tool_call")
	first := callOf(t, e)
	if stdout != "one\n" || first.Name != "get_weather" || !strings.HasPrefix(first.RunID, "run_a.") {
		t.Fatalf("a's first pause: %s after stdout %q", e.data, stdout)
	}
	svcs[0].Drain()
	e, _ = upTo(t, ch, "result")
	if status, out := resultOf(t, e); status != http.StatusServiceUnavailable || out.Error == nil || out.Error.Kind != "closed" {
		t.Fatalf("a's stream as it drains: %s", e.data)
	}

	ch = b.eventsContinue(first.RunID, value(first.ID, "Oslo"))
	e, stdout = upTo(t, ch, "tool_call")
	second := callOf(t, e)
	if stdout != "two Oslo\n" || string(second.Arguments) != `{"city":"Oslo"}` || !strings.HasPrefix(second.RunID, "run_b.") {
		t.Fatalf("b's events from the pause on: %s after stdout %q", e.data, stdout)
	}
	if n := lookupsOf("durable-ev"); n != 1 {
		t.Fatalf("lookups between the pauses: %d, want 1", n)
	}

	chC := c.eventsContinue(second.RunID, value(second.ID, "Rome"))
	e, stdout = upTo(t, chC, "tool_call")
	third := callOf(t, e)
	if stdout != "three\n" || string(third.Arguments) != `{"city":"Rome"}` || !strings.HasPrefix(third.RunID, "run_c.") {
		t.Fatalf("c's events from b's pause on: %s after stdout %q", e.data, stdout)
	}
	c.accepted(third.RunID, value(third.ID, "fog"))
	e, stdout = upTo(t, chC, "result")
	status, out := resultOf(t, e)
	if status != http.StatusOK || stdout != "" || string(out.Value) != `["Oslo","Rome","fog"]` || out.RunID != third.RunID {
		t.Fatalf("c's end: %s after stdout %q", e.data, stdout)
	}
	if n := lookupsOf("durable-ev"); n != 0 {
		t.Fatalf("lookups on c: %d, want 0 (replayed from the record)", n)
	}
}

// TestDurableEventsApproval: a run answered as events that waits for a
// decision is kept in the store before its approval_required event; its
// replica drains, and the decision sent to another replica asking for
// events is answered with the run's events from the pause on: the call
// refused, the tool not called.
func TestDurableEventsApproval(t *testing.T) {
	tl, books, _, start := askingReplicas(t)
	svcA, a := start("a")
	_, b := start("b")
	ch := a.eventsPost("/v1/run", run{"source": "print('asking')\ntry:\n    lookup(key='book')\nexcept PermissionError as e:\n    r = str(e)\nprint('refused')\nr"})
	e, stdout := upTo(t, ch, "approval_required")
	var asked struct {
		ID    string `json:"id"`
		Tool  string `json:"tool"`
		RunID string `json:"run_id"`
	}
	if err := json.Unmarshal([]byte(e.data), &asked); err != nil || stdout != "asking\n" || asked.Tool != "lookup" || !strings.HasPrefix(asked.RunID, "run_a.") {
		t.Fatalf("a's approval: %s after stdout %q (%v)", e.data, stdout, err)
	}
	svcA.Drain()
	e, _ = upTo(t, ch, "result")
	if status, out := resultOf(t, e); status != http.StatusServiceUnavailable || out.Error == nil || out.Error.Kind != "closed" {
		t.Fatalf("a's stream as it drains: %s", e.data)
	}
	ch = b.eventsPost("/v1/runs/"+asked.RunID+"/approvals", run{"approvals": []any{allow(asked.ID, false, "no books today")}})
	e, stdout = upTo(t, ch, "result")
	status, out := resultOf(t, e)
	if status != http.StatusOK || stdout != "refused\n" || string(out.Value) != `"no books today"` || !strings.HasPrefix(out.RunID, "run_b.") {
		t.Fatalf("b's events from the pause on: %s after stdout %q", e.data, stdout)
	}
	if n := lookupsIn(tl)["book"]; n != 0 || books.Load() != 1 {
		t.Fatalf("lookups of book %d (want 0), Approve asked %d times (want 1: on a; b asks the caller again, spine.Record.Asking)", n, books.Load())
	}
}

// TestDurableEventsCut: a run answered as events that goes on between two
// pauses when its replica's grace runs out (Cut) ends its stream with 503
// closed and is kept in the store: another replica continues it from its
// pause.
func TestDurableEventsCut(t *testing.T) {
	svcs, cs, _ := durableServers(t, "a", "b")
	for len(tools.Gate.Entered) > 0 {
		<-tools.Gate.Entered
	}
	source := "a = get_weather('Paris')\ngate(wait=False)\nwhile a == 'Oslo':\n    pass\nb = get_weather(a)\n[a, b]"
	ch := cs[0].runEvents(t.Context(), "/v1/run", run{"source": source, "tools": []any{weather}})
	e, _ := upTo(t, ch, "tool_call")
	first := callOf(t, e)
	cs[0].accepted(first.RunID, value(first.ID, "Oslo"))
	<-tools.Gate.Entered // a runs on past the pause, in its loop
	svcs[0].Drain()
	svcs[0].Cut()
	e, _ = upTo(t, ch, "result")
	if status, out := resultOf(t, e); status != http.StatusServiceUnavailable || out.Error == nil || out.Error.Kind != "closed" {
		t.Fatalf("a's stream cut: %s", e.data)
	}
	// Another value, which ends the loop: the store checks the results' ids.
	ch = cs[1].eventsContinue(first.RunID, value(first.ID, "Rome"))
	e, _ = upTo(t, ch, "tool_call")
	second := callOf(t, e)
	<-tools.Gate.Entered // b's
	cs[1].accepted(second.RunID, value(second.ID, "fog"))
	e, _ = upTo(t, ch, "result")
	if status, out := resultOf(t, e); status != http.StatusOK || string(out.Value) != `["Rome","fog"]` || !strings.HasPrefix(out.RunID, "run_b.") {
		t.Fatalf("b's end: %s", e.data)
	}
}

// TestDurableEventsNotKeptAsJSON: a run the store keeps answered as JSON
// that it would not keep answered as events (one with early reads, a
// session's) is answered as JSON when a continuation that takes it over
// asks for events: as events, its reads pending at one pause were sent
// again as tool_call events at the next, each asked twice.
func TestDurableEventsNotKeptAsJSON(t *testing.T) {
	svcs, cs, _ := durableServers(t, "a", "b")
	a, b := cs[0], cs[1]
	asEvents := func(runID string, results ...any) (int, service.Response) {
		data, _ := json.Marshal(run{"results": results})
		req, err := http.NewRequestWithContext(t.Context(), "POST", b.url+"/v1/runs/"+runID+"/tool_results", strings.NewReader(string(data)))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
			t.Fatalf("a continuation asking for events: %d, Content-Type %q, want JSON", resp.StatusCode, ct)
		}
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b.answer(resp.StatusCode, raw)
	}
	status, early := a.runWith("/v1/run", run{"source": durableEarlyProgram("events-early"), "tools": []any{price}, "early_reads": true})
	if status != http.StatusOK || early.Status != "tool_calls" {
		t.Fatalf("a's run with early reads: %d %+v", status, early.Error)
	}
	id := a.create()
	a.mustRun(id, "import random\nx = 1")
	status, sess := a.sessionRun(id, sessionProgram("events-session"))
	paused(t, status, sess, `get_weather{"city":"Paris"}`)
	svcs[0].Drain()
	if err := svcs[0].Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
	status, out := asEvents(early.RunID, answerAll(t, early)...)
	if status != http.StatusOK || out.Status != "tool_calls" || strings.Count(pauseOf(out), "shop.price") != 3 || !strings.HasPrefix(out.RunID, "run_b.") {
		t.Fatalf("the run with early reads taken over: %d %s (error %+v)", status, pauseOf(out), out.Error)
	}
	status, out = asEvents(sess.RunID, value(sess.Pending[0].ID, map[string]any{"next": "Oslo"}))
	paused(t, status, out, `get_weather{"city":"Oslo"}`)
}
