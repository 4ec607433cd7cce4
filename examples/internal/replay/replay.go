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
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image/png"
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

// CheckChart checks that data, base64, is the PNG both examples' image
// exchanges draw: 40 x 24 pixels, white, with the book's blue bar 21 pixels
// high and the pen's orange one 2 pixels high.
func CheckChart(t *testing.T, data string) {
	t.Helper()
	raw, err := base64.StdEncoding.DecodeString(data)
	if err != nil {
		t.Fatalf("the image's data: %v", err)
	}
	img, err := png.Decode(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("the image: %v", err)
	}
	rgb := func(x, y int) [3]uint32 {
		r, g, b, _ := img.At(x, y).RGBA()
		return [3]uint32{r >> 8, g >> 8, b >> 8}
	}
	white, blue, orange := [3]uint32{0xff, 0xff, 0xff}, [3]uint32{0x1f, 0x77, 0xb4}, [3]uint32{0xff, 0x7f, 0x0e}
	if b := img.Bounds(); b.Dx() != 40 || b.Dy() != 24 || rgb(10, 23) != blue || rgb(10, 3) != blue || rgb(10, 2) != white ||
		rgb(30, 22) != orange || rgb(30, 21) != white || rgb(1, 23) != white {
		t.Errorf("the chart is not as drawn: %v, blue bar %v..%v, orange bar %v..%v", b, rgb(10, 23), rgb(10, 2), rgb(30, 22), rgb(30, 21))
	}
}
