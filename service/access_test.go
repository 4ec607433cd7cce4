package service_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/spine-run/spine/door"
	"github.com/spine-run/spine/internal/spinetest"
	"github.com/spine-run/spine/service"
)

// lineSink is a JSON log handler's writer that hands each line on, decoded.
type lineSink chan map[string]any

func (s lineSink) Write(p []byte) (int, error) {
	var m map[string]any
	if err := json.Unmarshal(p, &m); err == nil {
		s <- m
	}
	return len(p), nil
}

// accessLine waits for the access log line of the request with id.
func accessLine(t *testing.T, lines lineSink, id string) map[string]any {
	t.Helper()
	for m := range lines {
		if m["msg"] == "request" && m["request_id"] == id {
			return m
		}
	}
	return nil
}

// TestAccessLog: every request gets one line, at Info (so without
// --verbose), with its method, path, status, body bytes, duration, request
// id (the client's when fit, else a new one, sent back either way), the
// session it is about, the token's name and never the token, and the
// answer's error kind: a time-out and a Python error included.
func TestAccessLog(t *testing.T) {
	const token = "access-log-secret-token"
	lines := make(lineSink, 100)
	logger := slog.New(slog.NewJSONHandler(lines, &slog.HandlerOptions{Level: slog.LevelInfo}))
	svc := service.New(runner, &service.Options{Token: token})
	ts := spinetest.ServeHTTP(t, door.AccessLog(logger, nil, svc))

	send := func(method, path, id, body string) (*http.Response, map[string]any) {
		t.Helper()
		req, err := http.NewRequest(method, ts.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		if id != "" {
			req.Header.Set(door.RequestIDHeader, id)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		got := resp.Header.Get(door.RequestIDHeader)
		if id != "" && len(id) <= door.MaxRequestID && !strings.ContainsAny(id, " \n\"<") && got != id {
			t.Errorf("X-Request-Id %q sent back as %q", id, got)
		}
		line := accessLine(t, lines, got)
		if strings.Contains(line["token"].(string), token) {
			t.Errorf("the log shows the token: %v", line)
		}
		return resp, line
	}

	resp, line := send("POST", "/v1/run", "client-id-1", `{"source": "print('hi')\n6 * 7"}`)
	if line["method"] != "POST" || line["path"] != "/v1/run" || line["status"] != 200.0 || line["token"] != "default" ||
		line["bytes"].(float64) <= 0 || line["level"] != "INFO" || line["duration_ms"] == nil {
		t.Errorf("run: %v", line)
	}
	if resp.ContentLength > 0 && line["bytes"] != float64(resp.ContentLength) {
		t.Errorf("bytes %v, Content-Length %d", line["bytes"], resp.ContentLength)
	}

	// Ids not fit to log are replaced: too long, or with characters a log
	// line or a header should not carry.
	for _, bad := range []string{strings.Repeat("x", door.MaxRequestID+1), "a b", `a"b`, "<script>"} {
		resp, _ := send("GET", "/livez", bad, "")
		if got := resp.Header.Get(door.RequestIDHeader); got == bad || len(got) != 32 {
			t.Errorf("X-Request-Id %q answered with %q", bad, got)
		}
	}

	_, line = send("POST", "/v1/run", "timeout-1", `{"source": "while True: pass", "timeout_ms": 200}`)
	if line["status"] != 408.0 || line["error"] != "timeout" {
		t.Errorf("time-out: %v", line)
	}
	_, line = send("POST", "/v1/run", "python-1", `{"source": "1/0"}`)
	if line["status"] != 422.0 || line["error"] != "python" {
		t.Errorf("Python error: %v", line)
	}

	// A session's id, from its creation on.
	req, _ := http.NewRequest("POST", ts.URL+"/v1/sessions", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set(door.RequestIDHeader, "session-new")
	r2, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var info service.SessionInfo
	json.NewDecoder(r2.Body).Decode(&info)
	r2.Body.Close()
	if line := accessLine(t, lines, "session-new"); info.ID == "" || line["session"] != info.ID {
		t.Errorf("session created %q: %v", info.ID, line)
	}
	_, line = send("POST", "/v1/sessions/"+info.ID+"/run", "session-run", `{"source": "x = 1"}`)
	if line["session"] != info.ID || line["status"] != 200.0 {
		t.Errorf("session run: %v", line)
	}

	// Without the token: 401, token "-".
	r3, err := http.Post(ts.URL+"/v1/run", "application/json", strings.NewReader(`{"source": "1"}`))
	if err != nil {
		t.Fatal(err)
	}
	r3.Body.Close()
	if line := accessLine(t, lines, r3.Header.Get(door.RequestIDHeader)); line["status"] != 401.0 || line["token"] != "-" || line["error"] != "unauthorized" {
		t.Errorf("no token: %v", line)
	}
}

// TestProbes: /livez and /readyz answer without the token; /readyz is 503
// once the Server is draining, /livez still 200.
func TestProbes(t *testing.T) {
	svc := service.New(runner, &service.Options{Token: "probe-token"})
	ts := spinetest.ServeHTTP(t, svc)
	get := func(path string) int {
		resp, err := http.Get(ts.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if l, r := get("/livez"), get("/readyz"); l != 200 || r != 200 {
		t.Fatalf("/livez %d, /readyz %d", l, r)
	}
	if get("/metrics") != http.StatusUnauthorized {
		t.Error("/metrics without the token")
	}
	svc.Drain()
	if l, r := get("/livez"), get("/readyz"); l != 200 || r != http.StatusServiceUnavailable {
		t.Fatalf("draining: /livez %d, /readyz %d", l, r)
	}
	// TokenName outside AccessLog is "".
	if door.TokenName(context.Background()) != "" {
		t.Error("TokenName outside a request")
	}
}

// TestAccessLogDrainLevels: the 503s a drain gives by design — GET /readyz,
// a request refused while draining — are logged at Info, on the Server and
// on spine mcp's handlers (ServeReady, RefuseWhileDraining); another answer
// of 500 and up stays at Error.
func TestAccessLogDrainLevels(t *testing.T) {
	lines := make(lineSink, 100)
	logger := slog.New(slog.NewJSONHandler(lines, &slog.HandlerOptions{Level: slog.LevelInfo}))
	svc := service.New(runner, nil)
	var draining atomic.Bool
	mux := http.NewServeMux()
	mux.HandleFunc("GET /mcp/readyz", func(w http.ResponseWriter, r *http.Request) { door.ServeReady(&draining, w) })
	mux.Handle("/mcp", door.RefuseWhileDraining(&draining, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))
	mux.HandleFunc("/broken", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) })
	mux.Handle("/", svc)
	ts := spinetest.ServeHTTP(t, door.AccessLog(logger, nil, mux))
	send := func(method, path string) map[string]any {
		t.Helper()
		req, _ := http.NewRequest(method, ts.URL+path, strings.NewReader(`{"source": "1"}`))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return accessLine(t, lines, resp.Header.Get(door.RequestIDHeader))
	}
	svc.Drain()
	draining.Store(true)
	for _, c := range []struct{ method, path, level string }{
		{"GET", "/readyz", "INFO"},
		{"POST", "/v1/run", "INFO"},
		{"GET", "/mcp/readyz", "INFO"},
		{"POST", "/mcp", "INFO"},
		{"GET", "/broken", "ERROR"},
	} {
		if line := send(c.method, c.path); line["status"] != 503.0 || line["level"] != c.level {
			t.Errorf("%s %s while draining: %v, want 503 at %s", c.method, c.path, line, c.level)
		}
	}
}
