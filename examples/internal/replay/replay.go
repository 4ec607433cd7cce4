// Package replay is what the examples' tests share: a local HTTP server that
// answers an LLM API's requests with a recorded exchange, and the check of
// the requests an example sent against the recorded ones.
//
// An exchange is a folder of JSON files, one pair per turn, in the shapes
// the real API uses: N-request.json, what the example is expected to send,
// and N-response.json, what the API answered.
package replay

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
)

// Server answers the requests of one exchange, in order.
type Server struct {
	URL string

	t         *testing.T
	dir       string
	responses []string

	mu       sync.Mutex
	requests []map[string]any
}

// Serve serves the exchange in dir until the test ends. Every request must be
// a POST to path for which ok (the API's authentication, say) returns "";
// otherwise the test fails with ok's text.
func Serve(t *testing.T, dir, path string, ok func(*http.Request) string) *Server {
	t.Helper()
	responses, _ := filepath.Glob(filepath.Join(dir, "*-response.json"))
	if len(responses) == 0 {
		t.Fatalf("no responses in %s", dir)
	}
	s := &Server{t: t, dir: dir, responses: responses}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req map[string]any
		if err := json.Unmarshal(body, &req); err != nil {
			t.Errorf("a request that is not a JSON object: %v\n%s", err, body)
		}
		s.mu.Lock()
		s.requests = append(s.requests, req)
		n := len(s.requests)
		s.mu.Unlock()
		if r.Method != http.MethodPost || r.URL.Path != path {
			t.Errorf("request %d: %s %s, want POST %s", n, r.Method, r.URL.Path, path)
		}
		if problem := ok(r); problem != "" {
			t.Errorf("request %d: %s", n, problem)
		}
		if n > len(responses) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintf(w, `{"error": {"type": "invalid_request_error", "message": "the recording has %d turns"}}`, len(responses))
			return
		}
		data, err := os.ReadFile(responses[n-1])
		if err != nil {
			t.Error(err)
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(data)
	}))
	t.Cleanup(srv.Close)
	s.URL = srv.URL
	return s
}

// Requests returns the requests received so far, decoded.
func (s *Server) Requests() []map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]map[string]any{}, s.requests...)
}

// Check compares the requests received with the recorded ones: one for each
// recorded response, each equal to its N-request.json as JSON values. With
// update, it writes them there instead (go test -update).
func (s *Server) Check(update bool) {
	t := s.t
	t.Helper()
	requests := s.Requests()
	if len(requests) != len(s.responses) {
		t.Fatalf("%d requests for %d recorded turns", len(requests), len(s.responses))
	}
	for i, got := range requests {
		file := strings.Replace(s.responses[i], "-response.json", "-request.json", 1)
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false) // "<agent>" as it is, for a reader
		enc.SetIndent("", "  ")
		enc.Encode(got)
		pretty := buf.Bytes()
		if update {
			if err := os.WriteFile(file, pretty, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var want map[string]any
		if err := json.Unmarshal(data, &want); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("request %d differs from %s (go test -update rewrites it); sent:\n%s", i+1, file, pretty)
		}
	}
}

// Path returns the value at path in v, a decoded JSON value: each element a
// key of an object or an index of an array. It returns nil when there is none.
func Path(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			a, _ := v.([]any)
			if k < 0 {
				k += len(a)
			}
			if k < 0 || k >= len(a) {
				return nil
			}
			v = a[k]
		}
	}
	return v
}
