package service

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/internal/spinetest"
	"github.com/spine-run/spine/sessionstore"
)

// TestTakeOverLoadsBounded: a replica loads at most maxLoading stored runs
// at once (each up to maxStoredRun, read before the continuation is
// checked): one more continuation it would have to load is answered 429
// overloaded, and one is loaded again once a load ends.
func TestTakeOverLoadsBounded(t *testing.T) {
	st, err := sessionstore.Open(context.Background(), "mem://")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	s := New(spinetest.NewRunner(t, nil, &spine.Options{PoolSize: -1}), &Options{Replica: "b", SessionStore: st})
	defer s.Close(context.Background())
	post := func() (int, Response) {
		req := httptest.NewRequest("POST", "/v1/runs/run_a.0123abcd."+strings.Repeat("7", 32)+"/tool_results", strings.NewReader(`{"results": [{"id": "call_1", "value": 1}]}`))
		req.Host = "127.0.0.1"
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		var out Response
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
			t.Fatalf("%d %s: %v", rec.Code, rec.Body, err)
		}
		return rec.Code, out
	}
	for range maxLoading {
		s.desk.loading <- struct{}{} // loads in progress
	}
	if status, out := post(); status != http.StatusTooManyRequests || out.Error == nil || out.Error.Kind != kindOverloaded {
		t.Fatalf("a continuation while %d runs load: %d %+v, want 429 overloaded", maxLoading, status, out.Error)
	}
	<-s.desk.loading
	if status, out := post(); status == http.StatusTooManyRequests {
		t.Fatalf("a continuation once a load ended: %d %+v", status, out.Error)
	}
}
