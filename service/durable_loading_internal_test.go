package service

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/internal/spinetest"
	"github.com/spine-run/spine/sessionstore"
)

// TestTakeOverWaitsUnloaded: a takeover of a session's run that waits for
// its session's lock (a run in flight in it on this replica) does not hold
// one of the maxLoading loads meanwhile: the run is loaded and checked,
// counted among the paused runs, and a wait as long as the run's time limit
// would keep the replica's other takeovers out.
func TestTakeOverWaitsUnloaded(t *testing.T) {
	st, err := sessionstore.Open(context.Background(), "mem://")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	r := spinetest.NewRunner(t, nil, &spine.Options{})
	a := New(r, &Options{Replica: "a", SessionStore: st})
	defer a.Close(context.Background())
	b := New(r, &Options{Replica: "b", SessionStore: st})
	defer b.Close(context.Background())
	urlA, urlB := spinetest.ServeHTTP(t, a).URL, spinetest.ServeHTTP(t, b).URL
	post := func(url, path string, body any) (int, Response) {
		data, _ := json.Marshal(body)
		resp, err := http.Post(url+path, "application/json", bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var out Response
		json.Unmarshal(raw, &out)
		return resp.StatusCode, out
	}
	weather := map[string]any{"name": "get_weather", "input_schema": map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}}}
	status, raw := 0, map[string]any{}
	{
		resp, err := http.Post(urlA+"/v1/sessions", "", nil)
		if err != nil {
			t.Fatal(err)
		}
		json.NewDecoder(resp.Body).Decode(&raw)
		resp.Body.Close()
		status = resp.StatusCode
	}
	id, _ := raw["id"].(string)
	if status != http.StatusCreated || id == "" {
		t.Fatalf("POST /v1/sessions: %d %v", status, raw)
	}
	run := map[string]any{"source": "w = get_weather('Paris')\nw", "tools": []any{weather}}
	status, out := post(urlA, "/v1/sessions/"+id+"/run", run)
	if status != http.StatusOK || out.Status != statusToolCalls {
		t.Fatalf("a's run: %d %+v", status, out)
	}
	moving, call := out.RunID, out.Pending[0].ID
	a.Drain() // hands the run off: the store keeps it
	if err := a.Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
	// Another run in the session on b, paused: it holds the session there.
	if status, out = post(urlB, "/v1/sessions/"+id+"/run", run); status != http.StatusOK || out.Status != statusToolCalls {
		t.Fatalf("b's run: %d %+v", status, out)
	}
	holding := out
	done := make(chan struct{})
	go func() {
		defer close(done)
		post(urlB, "/v1/runs/"+moving+"/tool_results", map[string]any{"results": []any{map[string]any{"id": call, "value": "Oslo"}}})
	}()
	for { // the takeover waits for the session's lock
		resp, err := http.Get(urlB + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		text, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(text), "\nspine_session_requests_waiting 1\n") {
			break
		}
	}
	if n := len(b.desk.loading); n != 0 {
		t.Fatalf("a takeover waiting for its session's lock holds %d of the %d loads", n, maxLoading)
	}
	// b's run ends, and the takeover, which finds the session moved on, too.
	post(urlB, "/v1/runs/"+holding.RunID+"/tool_results", map[string]any{"results": []any{map[string]any{"id": holding.Pending[0].ID, "value": "Rome"}}})
	<-done
}

// TestDurableExpiryMoved: a run another replica took over while its
// replica still held it (as one thought dead) is not ended there by its
// --tool-wait as a run of its own: the store's claim, which names the run's
// new id, stays, and a continuation of the old id is answered 409 naming
// it, not 404 as a run that ended.
func TestDurableExpiryMoved(t *testing.T) {
	st, err := sessionstore.Open(context.Background(), "mem://")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	r := spinetest.NewRunner(t, nil, &spine.Options{})
	a := New(r, &Options{Replica: "a", SessionStore: st})
	defer a.Close(context.Background())
	b := New(r, &Options{Replica: "b", SessionStore: st})
	defer b.Close(context.Background())
	urlA, urlB := spinetest.ServeHTTP(t, a).URL, spinetest.ServeHTTP(t, b).URL
	post := func(url, path string, body any) (int, Response) {
		data, _ := json.Marshal(body)
		resp, err := http.Post(url+path, "application/json", bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var out Response
		json.Unmarshal(raw, &out)
		return resp.StatusCode, out
	}
	weather := map[string]any{"name": "get_weather", "input_schema": map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}}}
	status, out := post(urlA, "/v1/run", map[string]any{"source": "a = get_weather('Paris')\nb = get_weather(a)\n[a, b]", "tools": []any{weather}})
	if status != http.StatusOK || out.Status != statusToolCalls {
		t.Fatalf("a's run: %d %+v", status, out)
	}
	old := out.RunID
	results := map[string]any{"results": []any{map[string]any{"id": out.Pending[0].ID, "value": "Oslo"}}}
	status, out = post(urlB, "/v1/runs/"+old+"/tool_results", results)
	if status != http.StatusOK || out.Status != statusToolCalls || !strings.HasPrefix(out.RunID, "run_b.") {
		t.Fatalf("b's takeover: %d %+v", status, out)
	}
	moved := out.RunID
	pr := a.desk.paused.get(old, "")
	if pr == nil {
		t.Fatal("a does not hold its run")
	}
	pr.mu.Lock()
	pr.waitEnd.Reset(0) // a's --tool-wait runs out
	pr.mu.Unlock()
	<-pr.finished
	if status, out = post(urlB, "/v1/runs/"+old+"/tool_results", results); status != http.StatusConflict || out.RunID != moved {
		t.Fatalf("a continuation of the old id once a's wait ran out: %d run_id %q %+v, want 409 naming %s", status, out.RunID, out.Error, moved)
	}
}
