package service_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spine-run/spine/internal/spinetest"
	"github.com/spine-run/spine/service"
)

// toolCall is a tool_call event's data.
type toolCall struct {
	service.PendingCall
	RunID string `json:"run_id"`
}

// eventsOf sends req, which asks for events, and returns them as they
// arrive (closed at the end of the stream), a comment as an event named
// "comment".
func eventsOf(t *testing.T, req *http.Request) <-chan event {
	t.Helper()
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("status %d, Content-Type %q: %s", resp.StatusCode, ct, raw)
	}
	ch := make(chan event, 64)
	go func() {
		defer close(ch)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		var e event
		for sc.Scan() {
			switch line := sc.Text(); {
			case line == "":
				ch <- e
				e = event{}
			case strings.HasPrefix(line, ": "):
				e = event{"comment", line[len(": "):]}
			case strings.HasPrefix(line, "event: "):
				e.name = line[len("event: "):]
			case strings.HasPrefix(line, "data: "):
				e.data = line[len("data: "):]
			}
		}
	}()
	return ch
}

// runEvents posts body to path of c's server asking for events.
func (c client) runEvents(ctx context.Context, path string, body run) <-chan event {
	c.t.Helper()
	data, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, "POST", c.url+path, strings.NewReader(string(data)))
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	return eventsOf(c.t, req)
}

// upTo reads events up to the next one named name, and returns it with the
// stdout that came before it; the stream must not end first.
func upTo(t *testing.T, ch <-chan event, name string) (event, string) {
	t.Helper()
	var stdout string
	for e := range ch {
		switch e.name {
		case name:
			return e, stdout
		case "stdout":
			stdout += text(t, e)
		case "stderr", "comment":
		default:
			t.Fatalf("event %s %s while waiting for %s", e.name, e.data, name)
		}
	}
	t.Fatalf("the stream ended before a %s event (stdout %q)", name, stdout)
	return event{}, ""
}

// callOf decodes a tool_call event.
func callOf(t *testing.T, e event) toolCall {
	t.Helper()
	var c toolCall
	if err := json.Unmarshal([]byte(e.data), &c); err != nil {
		t.Fatalf("tool_call %s: %v", e.data, err)
	}
	if !strings.HasPrefix(c.RunID, "run_") || !strings.HasPrefix(c.ID, "call_") {
		t.Fatalf("tool_call %s", e.data)
	}
	return c
}

// resultOf decodes a result event.
func resultOf(t *testing.T, e event) (int, service.Response) {
	t.Helper()
	var r struct {
		Status int `json:"status"`
		service.Response
	}
	if err := json.Unmarshal([]byte(e.data), &r); err != nil {
		t.Fatalf("result %s: %v", e.data, err)
	}
	return r.Status, r.Response
}

// accepted posts results to a run answered as events: 202 and its ack.
func (c client) accepted(runID string, results ...any) {
	c.t.Helper()
	data, _ := json.Marshal(run{"results": results})
	status, raw, _ := c.send("POST", "/v1/runs/"+runID+"/tool_results", "application/json", data)
	var ack service.ResultsAccepted
	if err := json.Unmarshal(raw, &ack); err != nil || status != http.StatusAccepted || ack.RunID != runID || ack.Accepted != len(results) {
		c.t.Fatalf("tool_results: status %d %s, want 202 for %d results", status, raw, len(results))
	}
}

// TestClientToolsEvents: a run with client tools asked as events sends each
// call as a tool_call event after the output before it, keeps the stream
// open while it waits, takes the results (202) and ends with one result
// event; an error result raises in the program.
func TestClientToolsEvents(t *testing.T) {
	_, ts := newSessionServer(t, nil, nil)
	c := client{t: t, url: ts.URL}
	src := "print('asking')\nw = get_weather('Paris')\nprint('got', w)\n" +
		"try:\n    get_weather(city='Atlantis')\nexcept RuntimeError as e:\n    err = str(e)\n[w, err]"
	ch := c.runEvents(t.Context(), "/v1/run", run{"source": src, "tools": []any{weather}})
	e, stdout := upTo(t, ch, "tool_call")
	call := callOf(t, e)
	if stdout != "asking\n" || call.Name != "get_weather" || string(call.Arguments) != `{"city":"Paris"}` {
		t.Fatalf("stdout %q before %s", stdout, e.data)
	}
	runID := call.RunID
	c.accepted(runID, value(call.ID, "sun"))
	e, stdout = upTo(t, ch, "tool_call")
	second := callOf(t, e)
	if stdout != "got sun\n" || string(second.Arguments) != `{"city":"Atlantis"}` || second.RunID != runID || second.ID == call.ID {
		t.Fatalf("stdout %q before %s", stdout, e.data)
	}
	// A result for a call answered already, or one never asked, changes nothing.
	status, out := c.results(runID, value(call.ID, "again"))
	wantError(t, "a result twice", status, out, http.StatusConflict, "conflict")
	status, out = c.results(runID, value("call_99", 1))
	wantError(t, "an unknown call", status, out, http.StatusBadRequest, "bad_request")
	c.accepted(runID, map[string]any{"id": second.ID, "error": map[string]any{"message": "no such city", "type": "LookupError"}})
	e, _ = upTo(t, ch, "result")
	status, out = resultOf(t, e)
	if status != http.StatusOK || string(out.Value) != `["sun","LookupError: no such city"]` || out.RunID != runID || out.ToolCalls != 2 || out.Stdout != "asking\ngot sun\n" {
		t.Fatalf("result %s", e.data)
	}
	if e, ok := <-ch; ok {
		t.Fatalf("an event after the result: %+v", e)
	}
	// A refusal before the run is JSON, a server tool's name included.
	data, _ := json.Marshal(run{"source": "1", "tools": []any{map[string]any{"name": "lookup"}}})
	status, raw, header := c.send("POST", "/v1/run", "application/json", data, "Accept", "text/event-stream")
	if out := c.answer(status, raw); status != http.StatusBadRequest || header.Get("Content-Type") != "application/json" || !strings.Contains(out.Error.Message, `"lookup"`) {
		t.Fatalf("a server tool's name: status %d %s", status, raw)
	}
}

// TestClientToolsEventsEach: the calls of a loop of early reads are events
// before the program waits; each is answered on its own, and the run goes
// on when the call it waits for (the first) is answered.
func TestClientToolsEventsEach(t *testing.T) {
	_, ts := newSessionServer(t, nil, &service.Options{Slots: 1})
	c := client{t: t, url: ts.URL}
	src := "total = 0\nfor item in ['a', 'b', 'c', 'd']:\n    total += shop.price(item)\nprint('total', total)\ntotal"
	ch := c.runEvents(t.Context(), "/v1/run", run{"source": src, "tools": []any{price}, "early_reads": true})
	var calls []toolCall
	for range 4 {
		e, _ := upTo(t, ch, "tool_call")
		calls = append(calls, callOf(t, e))
	}
	// Early reads reach their Call each on its own goroutine: their events
	// come in any order; their ids number them in the order they started.
	sort.Slice(calls, func(i, j int) bool {
		a, _ := strconv.Atoi(strings.TrimPrefix(calls[i].ID, "call_"))
		b, _ := strconv.Atoi(strings.TrimPrefix(calls[j].ID, "call_"))
		return a < b
	})
	for i, call := range calls {
		if want := fmt.Sprintf(`{"item":"%c"}`, 'a'+i); string(call.Arguments) != want {
			t.Fatalf("call %d: %s, want %s", i, call.Arguments, want)
		}
	}
	runID := calls[0].RunID
	// The last three, one by one: the run still waits for the first.
	for i := 3; i >= 1; i-- {
		c.accepted(runID, value(calls[i].ID, (i+1)*10))
	}
	// Paused, it holds no slot: the server's only one runs another program.
	spinetest.WaitFor(t, "the run to pause", func() bool { return scrape(t, ts.URL)["spine_runs_in_flight"] == 0 })
	if status, out := c.runWith("/v1/run", run{"source": "2 + 2"}); status != http.StatusOK || string(out.Value) != "4" {
		t.Fatalf("a run beside the paused one: %d %+v", status, out)
	}
	c.accepted(runID, value(calls[0].ID, 10))
	e, stdout := upTo(t, ch, "result")
	if status, out := resultOf(t, e); status != http.StatusOK || string(out.Value) != "100" || stdout != "total 100\n" || out.ToolCalls != 4 {
		t.Fatalf("result %s, stdout %q", e.data, stdout)
	}
}

// TestClientToolsEventsBounds: a caller that closes the stream while its run
// waits stops the run; --tool-wait ends a stream's run with a result event
// of 408; past --paused, a run asked as events is refused with JSON.
func TestClientToolsEventsBounds(t *testing.T) {
	svc := service.New(runner, &service.Options{MaxPaused: 1})
	ts := spinetest.ServeHTTP(t, svc)
	t.Cleanup(func() { svc.Close(context.Background()) })
	c := client{t: t, url: ts.URL}
	ctx, cancel := context.WithCancel(t.Context())
	ch := c.runEvents(ctx, "/v1/run", run{"source": "get_weather('x')", "tools": []any{weather}})
	e, _ := upTo(t, ch, "tool_call")
	call := callOf(t, e)
	// The cap holds for streams too: a refusal, as JSON.
	data, _ := json.Marshal(run{"source": "get_weather('y')", "tools": []any{weather}})
	status, raw, _ := c.send("POST", "/v1/run", "application/json", data, "Accept", "text/event-stream")
	wantError(t, "past --paused", status, c.answer(status, raw), http.StatusTooManyRequests, "too_many_paused")
	cancel()
	for range ch {
	}
	spinetest.WaitFor(t, "the run stopped as its caller went away", func() bool {
		return strings.Contains(metrics(t, ts.URL, ""), `spine_runs_total{outcome="canceled"} 1`)
	})
	status, out := c.results(call.RunID, value(call.ID, 1))
	wantError(t, "results for a stopped run", status, out, http.StatusNotFound, "not_found")

	svc = service.New(runner, &service.Options{ToolWait: 1})
	ts = spinetest.ServeHTTP(t, svc)
	t.Cleanup(func() { svc.Close(context.Background()) })
	c.url = ts.URL
	ch = c.runEvents(t.Context(), "/v1/run", run{"source": "print('waiting')\nget_weather('x')", "tools": []any{weather}})
	upTo(t, ch, "tool_call")
	e, _ = upTo(t, ch, "result")
	if status, out := resultOf(t, e); status != http.StatusRequestTimeout || out.Error == nil || out.Error.Kind != "tool_wait" || out.Stdout != "waiting\n" {
		t.Fatalf("result %s", e.data)
	}
}

// TestClientToolsStream: /v1/run/stream takes client tools (the tools
// setting); as events, a read-only call is asked as soon as its statement
// is complete, while the program still arrives; as JSON, the run pauses
// as /v1/run's does.
func TestClientToolsStream(t *testing.T) {
	_, ts := newSessionServer(t, nil, nil)
	c := client{t: t, url: ts.URL}
	list, _ := json.Marshal([]any{price})
	pr, pw := io.Pipe()
	defer pw.Close()
	req := streamRequest(t, ts.URL+"/v1/run/stream?tools="+url.QueryEscape(string(list)), pr)
	ch := eventsOf(t, req)
	// The first statement is complete once the next one starts.
	if _, err := io.WriteString(pw, "p = shop.price('book')\nprint('streamed')\n"); err != nil {
		t.Fatal(err)
	}
	e, _ := upTo(t, ch, "tool_call")
	call := callOf(t, e)
	if call.Name != "shop.price" || string(call.Arguments) != `{"item":"book"}` {
		t.Fatalf("tool_call %s", e.data)
	}
	c.accepted(call.RunID, value(call.ID, 21))
	if _, err := io.WriteString(pw, "result = p * 2\n"); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	e, stdout := upTo(t, ch, "result")
	if status, out := resultOf(t, e); status != http.StatusOK || string(out.Value) != "42" || stdout != "streamed\n" || out.ToolCalls != 1 {
		t.Fatalf("result %s, stdout %q", e.data, stdout)
	}

	// As JSON, with the tools in a header: the pause, then the end.
	req = streamRequest(t, ts.URL+"/v1/run/stream", strings.NewReader("w = get_weather('Oslo')\nw + '!'\n"))
	list, _ = json.Marshal([]any{weather})
	req.Header.Set("Spine-Tools", string(list))
	status, out, _ := do(t, req)
	paused(t, status, out, `get_weather{"city":"Oslo"}`)
	status, out = c.results(out.RunID, value(out.Pending[0].ID, "snow"))
	if status != http.StatusOK || string(out.Value) != `"snow!"` || out.Status != "done" {
		t.Fatalf("status %d %+v", status, out)
	}
	if got := scrape(t, ts.URL)["spine_streams_in_flight"]; got != 0 {
		t.Errorf("streams in flight after the runs: %v", got)
	}

	// Bad tools settings are 400 before anything runs.
	for _, tools := range []string{"[1]", `[{"name": "x", "input": 1}]`, `[{"name": "lookup"}]`, "[] []"} {
		req := streamRequest(t, ts.URL+"/v1/run/stream?tools="+url.QueryEscape(tools), strings.NewReader("1"))
		if status, out, _ := do(t, req); status != http.StatusBadRequest || out.Error.Kind != "bad_request" {
			t.Errorf("tools %s: status %d %+v", tools, status, out.Error)
		}
	}
}

// TestClientToolsEventsKeepAlive: a stream waiting for its caller sends
// comments, which keep a proxy from closing it, and goes on after them.
func TestClientToolsEventsKeepAlive(t *testing.T) {
	defer service.SetKeepAlive(time.Millisecond)()
	_, ts := newSessionServer(t, nil, nil)
	c := client{t: t, url: ts.URL}
	ch := c.runEvents(t.Context(), "/v1/run", run{"source": "get_weather('x')", "tools": []any{weather}})
	e, _ := upTo(t, ch, "tool_call")
	call := callOf(t, e)
	for e := range ch {
		if e.name == "comment" && e.data == "keep-alive" {
			break
		}
		t.Fatalf("event %s %s, want a comment", e.name, e.data)
	}
	c.accepted(call.RunID, value(call.ID, "fog"))
	e, _ = upTo(t, ch, "result")
	if status, out := resultOf(t, e); status != http.StatusOK || string(out.Value) != `"fog"` {
		t.Fatalf("result %s", e.data)
	}
}

// TestClientToolsEventsSession: a session's run asked as events pauses as
// any, and the session keeps what it did.
func TestClientToolsEventsSession(t *testing.T) {
	_, ts := newSessionServer(t, nil, nil)
	c := client{t: t, url: ts.URL}
	id := c.create()
	ch := c.runEvents(t.Context(), "/v1/sessions/"+id+"/run", run{"source": "w = get_weather('Oslo')\nw", "tools": []any{weather}})
	e, _ := upTo(t, ch, "tool_call")
	call := callOf(t, e)
	c.accepted(call.RunID, value(call.ID, "snow"))
	e, _ = upTo(t, ch, "result")
	if status, out := resultOf(t, e); status != http.StatusOK || string(out.Value) != `"snow"` {
		t.Fatalf("result %s", e.data)
	}
	if got := c.mustRun(id, "w"); got != `"snow"` {
		t.Errorf("the session after the run: %s", got)
	}
}
