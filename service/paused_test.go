package service_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/spine-run/spine/internal/spinetest"
	"github.com/spine-run/spine/service"
	"github.com/spine-run/spine/sessionstore"
)

// weather is a client tool as a model API declares it.
var weather = map[string]any{
	"name":         "get_weather",
	"description":  "The weather in a city.",
	"input_schema": map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}, "required": []string{"city"}},
}

// price is a read-only client tool, namespaced, with "parameters".
var price = map[string]any{
	"name":       "shop.price",
	"parameters": map[string]any{"type": "object", "properties": map[string]any{"item": map[string]any{"type": "string"}}, "required": []string{"item"}},
	"read_only":  true,
}

// runWith posts a run with client tools to path and decodes the answer.
func (c client) runWith(path string, body run) (int, service.Response) {
	c.t.Helper()
	data, _ := json.Marshal(body)
	status, raw, _ := c.send("POST", path, "application/json", data)
	return status, c.answer(status, raw)
}

// results posts results to a paused run.
func (c client) results(runID string, results ...any) (int, service.Response) {
	c.t.Helper()
	return c.runWith("/v1/runs/"+runID+"/tool_results", run{"results": results})
}

func value(id string, v any) map[string]any { return map[string]any{"id": id, "value": v} }

// paused checks that out is a pause listing want (name(arguments) each).
func paused(t *testing.T, status int, out service.Response, want ...string) {
	t.Helper()
	var got []string
	for _, p := range out.Pending {
		got = append(got, fmt.Sprintf("%s%s", p.Name, p.Arguments))
	}
	if status != http.StatusOK || out.Status != "tool_calls" || !strings.HasPrefix(out.RunID, "run_") || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("status %d %q run %q pending %v (error %+v), want a pause for %v", status, out.Status, out.RunID, got, out.Error, want)
	}
}

// TestClientTools: a run calling a tool the caller answers pauses with the
// call, its output so far and an id; the results continue it, to the next
// pause or the end; an error result raises in the program as a tool error.
func TestClientTools(t *testing.T) {
	_, ts := newSessionServer(t, nil, nil)
	c := client{t: t, url: ts.URL}
	src := "print('asking')\nw = get_weather('Paris')\n" +
		"try:\n    get_weather(city='Atlantis')\nexcept RuntimeError as e:\n    err = str(e)\n" +
		"[w['temp'] + lookup(key='book'), err]"
	status, out := c.runWith("/v1/run", run{"source": src, "tools": []any{weather}})
	paused(t, status, out, `get_weather{"city":"Paris"}`)
	if out.Stdout != "asking\n" || out.Pending[0].ID == "" {
		t.Errorf("stdout %q, id %q", out.Stdout, out.Pending[0].ID)
	}
	first := out.Pending[0].ID
	status, out = c.results(out.RunID, value(first, map[string]any{"temp": 20}))
	paused(t, status, out, `get_weather{"city":"Atlantis"}`)
	runID := out.RunID
	status, out = c.results(runID, map[string]any{"id": out.Pending[0].ID, "error": map[string]any{"message": "no such city", "type": "LookupError"}})
	if status != http.StatusOK || out.Status != "done" || string(out.Value) != `[41,"LookupError: no such city"]` || out.ToolCalls != 3 || out.Stdout != "asking\n" {
		t.Fatalf("end: status %d %+v", status, out)
	}
	// The run is over: its id is no more.
	status, out = c.results(runID, value(first, 1))
	wantError(t, "results after the end", status, out, http.StatusNotFound, "not_found")
}

// TestClientToolsEarlyReads: a loop of 16 reads of a read-only client tool
// is one pause listing all 16, and one round trip.
func TestClientToolsEarlyReads(t *testing.T) {
	_, ts := newSessionServer(t, nil, nil)
	c := client{t: t, url: ts.URL}
	var items, want []string
	for i := range 16 {
		items = append(items, fmt.Sprintf("'i%d'", i))
		want = append(want, fmt.Sprintf(`shop.price{"item":"i%d"}`, i))
	}
	src := "total = 0\nfor item in [" + strings.Join(items, ", ") + "]:\n    total += shop.price(item)\ntotal"
	status, out := c.runWith("/v1/run", run{"source": src, "tools": []any{price}, "early_reads": true})
	paused(t, status, out, want...)
	var results []any
	for i, p := range out.Pending {
		results = append(results, value(p.ID, i))
	}
	status, out = c.results(out.RunID, results...)
	if status != http.StatusOK || out.Status != "done" || string(out.Value) != "120" || out.ToolCalls != 16 {
		t.Fatalf("status %d %+v", status, out)
	}
}

// TestClientToolsRefused: bad tool lists are 400 naming what is wrong, and
// results that do not fit the pause are a 4xx that leaves the run as it was.
func TestClientToolsRefused(t *testing.T) {
	_, ts := newSessionServer(t, nil, nil)
	c := client{t: t, url: ts.URL}
	both := map[string]any{"name": "x", "input_schema": map[string]any{}, "parameters": map[string]any{}}
	for what, tc := range map[string]struct {
		tool any
		want string
	}{
		"a server tool's name": {map[string]any{"name": "lookup"}, `"lookup" is one of the Runner's tools`},
		"a bad name":           {map[string]any{"name": "a-b"}, "not a Python identifier"},
		"both schemas":         {both, `"input_schema" or "parameters", not both`},
		"a schema not object":  {map[string]any{"name": "x", "input_schema": []int{1}}, "must be a JSON Schema object"},
		"an unknown field":     {map[string]any{"name": "x", "input": 1}, `unknown field "input"`},
	} {
		status, out := c.runWith("/v1/run", run{"source": "1", "tools": []any{tc.tool}})
		if status != http.StatusBadRequest || out.Error == nil || !strings.Contains(out.Error.Message, tc.want) {
			t.Errorf("%s: status %d %+v, want 400 saying %s", what, status, out.Error, tc.want)
		}
	}
	status, out := c.runWith("/v1/run", run{"source": "1", "tools": []any{weather, weather}})
	wantError(t, "a tool twice", status, out, http.StatusBadRequest, "bad_request")

	status, out = c.runWith("/v1/run", run{"source": "[get_weather('a'), get_weather('b')]", "tools": []any{weather}})
	paused(t, status, out, `get_weather{"city":"a"}`)
	runID, id := out.RunID, out.Pending[0].ID
	for what, tc := range map[string]struct {
		results []any
		status  int
	}{
		"an unknown id":          {[]any{value("call_99", 1)}, http.StatusBadRequest},
		"no results":             {nil, http.StatusBadRequest},
		"the same id twice":      {[]any{value(id, 1), value(id, 2)}, http.StatusBadRequest},
		"value and error":        {[]any{map[string]any{"id": id, "value": 1, "error": map[string]any{"message": "m"}}}, http.StatusBadRequest},
		"an error and a message": {[]any{map[string]any{"id": id, "error": map[string]any{}}}, http.StatusBadRequest},
		"neither":                {[]any{map[string]any{"id": id}}, http.StatusBadRequest},
	} {
		status, out := c.results(runID, tc.results...)
		if status != tc.status || out.Error == nil {
			t.Errorf("%s: status %d %+v, want %d", what, status, out.Error, tc.status)
		}
	}
	status, out = c.results("run_0123456789abcdef0123456789abcdef", value(id, 1))
	wantError(t, "an unknown run", status, out, http.StatusNotFound, "not_found")
	// None of that changed the run: the first result is the program's.
	status, out = c.results(runID, value(id, "A"))
	paused(t, status, out, `get_weather{"city":"b"}`)
	second := out.Pending[0].ID
	status, out = c.results(runID, value(id, "again"))
	wantError(t, "a result twice", status, out, http.StatusConflict, "conflict")
	status, out = c.results(runID, value(second, "B"))
	if status != http.StatusOK || string(out.Value) != `["A","B"]` {
		t.Fatalf("status %d %+v", status, out)
	}
}

// TestClientToolsBounds: a paused run holds no slot; paused runs are
// capped; only the token that started a run continues it; a caller that
// never continues frees the run at ToolWait, and a late one is told so.
func TestClientToolsBounds(t *testing.T) {
	svc := service.New(runner, &service.Options{Slots: 1, MaxPaused: 2, ToolWait: 1, Token: "a", Tokens: []string{"b"}})
	ts := spinetest.ServeHTTP(t, svc)
	a, b := client{t: t, url: ts.URL, token: "a"}, client{t: t, url: ts.URL, token: "b"}
	status, out := a.runWith("/v1/run", run{"source": "get_weather('x')", "tools": []any{weather}})
	// The pause, unless the 1 ns wait ran out and ended the run before the
	// request took its pause: then the end, in its place.
	runID, id := out.RunID, "call_1"
	if out.Status == "done" {
		wantError(t, "a run stopped before its pause was read", status, out, http.StatusRequestTimeout, "tool_wait")
	} else {
		paused(t, status, out, `get_weather{"city":"x"}`)
	}
	// The one slot is free while the run waits.
	status, out = b.runWith("/v1/run", run{"source": "1 + 1"})
	if status != http.StatusOK || string(out.Value) != "2" {
		t.Fatalf("a run beside a paused one: status %d %+v", status, out)
	}
	status, out = b.results(runID, value(id, 1))
	wantError(t, "another token's run", status, out, http.StatusNotFound, "not_found")
	// ToolWait (1 ns) stops the run: wait for its end, then continue late.
	spinetest.WaitFor(t, "the run stopped at --tool-wait", func() bool {
		return strings.Contains(metrics(t, ts.URL, "a"), `spine_runs_total{outcome="tool_wait"} 1`)
	})
	status, out = a.results(runID, value(id, 1))
	wantError(t, "a late continuation", status, out, http.StatusRequestTimeout, "tool_wait")

	// The cap, with two tokens: one run each.
	svc = service.New(runner, &service.Options{MaxPaused: 2, Token: "a", Tokens: []string{"b"}})
	ts = spinetest.ServeHTTP(t, svc)
	a.url = ts.URL
	status, out = a.runWith("/v1/run", run{"source": "get_weather('x')", "tools": []any{weather}})
	paused(t, status, out, `get_weather{"city":"x"}`)
	held, heldID := out.RunID, out.Pending[0].ID
	status, out = a.runWith("/v1/run", run{"source": "get_weather('y')", "tools": []any{weather}})
	wantError(t, "past the token's share", status, out, http.StatusTooManyRequests, "too_many_paused")
	if status, out = a.results(held, value(heldID, 5)); status != http.StatusOK || string(out.Value) != "5" {
		t.Fatalf("status %d %+v", status, out)
	}
	status, out = a.runWith("/v1/run", run{"source": "get_weather('y')", "tools": []any{weather}})
	paused(t, status, out, `get_weather{"city":"y"}`)
}

func metrics(t *testing.T, url, token string) string {
	req, _ := http.NewRequestWithContext(t.Context(), "GET", url+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return string(raw)
}

// TestClientToolsSession: a session's run may pause; the session is busy
// until the run ends, and keeps what the run did.
func TestClientToolsSession(t *testing.T) {
	_, ts := newSessionServer(t, nil, nil)
	c := client{t: t, url: ts.URL}
	id := c.create()
	status, out := c.runWith("/v1/sessions/"+id+"/run", run{"source": "w = get_weather('Oslo')\nw", "tools": []any{weather}})
	paused(t, status, out, `get_weather{"city":"Oslo"}`)
	runID, call := out.RunID, out.Pending[0].ID
	status, out = c.runWith("/v1/sessions/"+id+"/run", run{"source": "1", "timeout_ms": 1})
	if status == http.StatusOK {
		t.Fatalf("a run of a session whose run is paused: %+v", out)
	}
	status, out = c.results(runID, value(call, "snow"))
	if status != http.StatusOK || string(out.Value) != `"snow"` {
		t.Fatalf("status %d %+v", status, out)
	}
	if got := c.mustRun(id, "w"); got != `"snow"` {
		t.Errorf("the session after the run: %s", got)
	}
}

// TestClientToolsClose: Close stops a run paused in a session (which holds
// the session's turn) rather than waiting for its caller, with a session
// store too (whose Close writes the sessions, and which keeps the run for
// another replica: the closed one answers 503).
func TestClientToolsClose(t *testing.T) {
	st, err := sessionstore.Open(t.Context(), "file://"+t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	svc, ts := newSessionServer(t, nil, &service.Options{SessionStore: st})
	c := client{t: t, url: ts.URL}
	id := c.create()
	status, out := c.runWith("/v1/sessions/"+id+"/run", run{"source": "get_weather('Oslo')", "tools": []any{weather}})
	paused(t, status, out, `get_weather{"city":"Oslo"}`)
	if err := svc.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	status, out = c.results(out.RunID, value(out.Pending[0].ID, 1))
	wantError(t, "a run stopped by Close", status, out, http.StatusServiceUnavailable, "closed")
}
