package service_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/spine-run/spine/service"
)

// TestRunElsewhere: a run's id names the replica that holds it; a
// continuation that reaches another replica is told where the run lives
// (421), one that reaches a later process of the same replica that the run
// ended with it (410), and neither changes the run.
func TestRunElsewhere(t *testing.T) {
	_, a := newSessionServer(t, nil, &service.Options{Replica: "r1"})
	_, b := newSessionServer(t, nil, &service.Options{Replica: "r2"})
	_, again := newSessionServer(t, nil, &service.Options{Replica: "r1"}) // r1 after a restart
	_, anon := newSessionServer(t, nil, nil)
	ca := client{t: t, url: a.URL}
	status, out := ca.runWith("/v1/run", run{"source": "get_weather('Paris')", "tools": []any{weather}})
	paused(t, status, out, `get_weather{"city":"Paris"}`)
	runID, id := out.RunID, out.Pending[0].ID
	if !strings.HasPrefix(runID, "run_r1.") {
		t.Fatalf("run id %q does not name its replica r1", runID)
	}
	for _, tc := range []struct {
		url, what, kind string
		status          int
		says            []string
	}{
		{b.URL, "another replica", "run_elsewhere", http.StatusMisdirectedRequest, []string{"replica r1", "this is replica r2"}},
		{anon.URL, "a replica without a name", "run_elsewhere", http.StatusMisdirectedRequest, []string{"replica r1", "without a name"}},
		{again.URL, "a later process of r1", "run_lost", http.StatusGone, []string{"earlier process of this replica"}},
	} {
		status, out := client{t: t, url: tc.url}.results(runID, value(id, 1))
		wantError(t, tc.what, status, out, tc.status, tc.kind)
		for _, s := range tc.says {
			if !strings.Contains(out.Error.Message, s) {
				t.Errorf("%s: %q does not say %q", tc.what, out.Error.Message, s)
			}
		}
	}
	// Two Servers without a name cannot tell each other from a restart:
	// not found, saying why.
	_, anonStart := newSessionServer(t, nil, nil)
	status, out = client{t: t, url: anonStart.URL}.runWith("/v1/run", run{"source": "get_weather('Rome')", "tools": []any{weather}})
	paused(t, status, out, `get_weather{"city":"Rome"}`)
	status, other := client{t: t, url: anon.URL}.results(out.RunID, value(out.Pending[0].ID, 1))
	wantError(t, "a run of another Server without a name", status, other, http.StatusNotFound, "not_found")
	if other.Error != nil && !strings.Contains(other.Error.Message, "another server") {
		t.Errorf("%q does not say another server may hold it", other.Error.Message)
	}
	// An id of this process's shape that it never made, and ids of no
	// Server's shape, are not found.
	for _, bad := range []string{runID[:len(runID)-1] + "0", "run_x", "run_r1.zz.00", "run_bad_name.12345678.0123456789abcdef0123456789abcdef"} {
		if bad == runID {
			continue
		}
		status, out := ca.results(bad, value(id, 1))
		wantError(t, "run "+bad, status, out, http.StatusNotFound, "not_found")
	}
	// The run is as it was: its own replica continues it.
	status, out = ca.results(runID, value(id, map[string]any{"temp": 20}))
	if status != http.StatusOK || out.Status != "done" || string(out.Value) != `{"temp":20}` {
		t.Fatalf("status %d %+v", status, out)
	}
}

func TestValidReplica(t *testing.T) {
	for _, ok := range []string{"r1", "spine-7d9f8-abcde", strings.Repeat("a", 63)} {
		if err := service.ValidReplica(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "a.b", "a_b", "a/b", "ä", strings.Repeat("a", 64)} {
		if service.ValidReplica(bad) == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestDrainPausedRun: a drain waits for the runs paused for their callers
// and admits their continuations, while it refuses every new request; Cut
// stops those still paused, answering them 503.
func TestDrainPausedRun(t *testing.T) {
	svc, ts := newSessionServer(t, nil, nil)
	c := client{t: t, url: ts.URL}
	start := func() (string, string) {
		status, out := c.runWith("/v1/run", run{"source": "get_weather('Paris')", "tools": []any{weather}})
		paused(t, status, out, `get_weather{"city":"Paris"}`)
		return out.RunID, out.Pending[0].ID
	}
	first, firstCall := start()
	second, secondCall := start()
	svc.Drain()
	waited := make(chan error, 1)
	go func() { waited <- svc.Wait(context.Background()) }()
	status, out := c.runWith("/v1/run", run{"source": "1"})
	wantError(t, "a new run while draining", status, out, http.StatusServiceUnavailable, "closed")
	status, out = c.results(first, value(firstCall, "sunny"))
	if status != http.StatusOK || out.Status != "done" || string(out.Value) != `"sunny"` {
		t.Fatalf("a continuation while draining: status %d %+v", status, out)
	}
	select {
	case err := <-waited:
		t.Fatalf("Wait returned (%v) while a run was paused", err)
	default:
	}
	svc.Cut()
	if err := <-waited; err != nil {
		t.Fatal(err)
	}
	status, out = c.results(second, value(secondCall, "late"))
	wantError(t, "a continuation after Cut", status, out, http.StatusServiceUnavailable, "closed")
}
