package service_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/spine-run/spine/internal/spinetest"
	"github.com/spine-run/spine/service"
)

// TestMediaType: /v1/run takes only application/json, and /v1/run/stream
// refuses no type and the three a web page can send cross-origin without a
// preflight (text/plain, forms): 415, and nothing runs.
func TestMediaType(t *testing.T) {
	ts := newServer(t, nil)
	send := func(path, contentType string, body io.Reader) (int, service.Response, http.Header) {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), "POST", ts.URL+path, body)
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		return do(t, req)
	}
	runBody := `{"source": "6 * 7"}`
	for _, ct := range []string{"", "text/plain", "text/plain; charset=utf-8", "application/x-www-form-urlencoded",
		"multipart/form-data; boundary=x", "text/x-python", "application/jsonx", "application/json; charset", "json"} {
		status, out, _ := send("/v1/run", ct, strings.NewReader(runBody))
		if status != http.StatusUnsupportedMediaType || out.Error == nil || out.Error.Kind != "unsupported_media_type" ||
			!strings.Contains(out.Error.Message, "application/json") || string(out.Value) != "null" {
			t.Errorf("/v1/run as %q: status %d, %+v", ct, status, out.Error)
		}
	}
	for _, ct := range []string{"application/json", "application/json; charset=utf-8", "Application/JSON"} {
		if status, out, _ := send("/v1/run", ct, strings.NewReader(runBody)); status != 200 || string(out.Value) != "42" {
			t.Errorf("/v1/run as %q: status %d, %+v", ct, status, out)
		}
	}
	for _, ct := range []string{"", "text/plain", "TEXT/PLAIN; charset=utf-8", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "text/"} {
		status, out, _ := send("/v1/run/stream", ct, strings.NewReader("6 * 7\n"))
		if status != http.StatusUnsupportedMediaType || out.Error == nil || out.Error.Kind != "unsupported_media_type" || !strings.Contains(out.Error.Message, "text/x-python") {
			t.Errorf("/v1/run/stream as %q: status %d, %+v", ct, status, out.Error)
		}
	}
	for _, ct := range []string{"text/x-python", "application/octet-stream", "application/json"} {
		if status, out, _ := send("/v1/run/stream", ct, strings.NewReader("6 * 7\n")); status != 200 || string(out.Value) != "42" {
			t.Errorf("/v1/run/stream as %q: status %d, %+v", ct, status, out)
		}
	}
	// A refused stream whose body never ends is answered, and its
	// connection closed.
	pr, pw := io.Pipe()
	defer pw.Close()
	status, out, header := send("/v1/run/stream", "text/plain", pr)
	if status != http.StatusUnsupportedMediaType || out.Error == nil || header.Get("Connection") != "close" {
		t.Errorf("an endless text/plain stream: status %d, Connection %q, %+v", status, header.Get("Connection"), out.Error)
	}
	metrics := scrape(t, ts.URL)
	if metrics[`spine_errors_total{kind="unsupported_media_type"}`] != 16 || metrics[`spine_runs_total{outcome="ok"}`] != 6 {
		t.Errorf("unsupported_media_type %v, ok runs %v", metrics[`spine_errors_total{kind="unsupported_media_type"}`], metrics[`spine_runs_total{outcome="ok"}`])
	}
}

// TestCrossOrigin: a run a browser sends from another origin is refused
// (403, forbidden); the same from the server's own origin, or from a client
// that is not a browser, runs. Reads (GET) are never refused.
func TestCrossOrigin(t *testing.T) {
	for _, token := range []string{"", "tok"} {
		ts := newServer(t, &service.Options{Token: token})
		send := func(method, path string, header map[string]string) (int, service.Response) {
			t.Helper()
			var body io.Reader
			if method == "POST" {
				body = strings.NewReader(`{"source": "6 * 7"}`)
			}
			req, _ := http.NewRequestWithContext(t.Context(), method, ts.URL+path, body)
			req.Header.Set("Content-Type", "application/json")
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			for k, v := range header {
				req.Header.Set(k, v)
			}
			status, out, _ := do(t, req)
			return status, out
		}
		for _, h := range []map[string]string{
			{"Sec-Fetch-Site": "cross-site"},
			{"Sec-Fetch-Site": "same-site"},
			{"Sec-Fetch-Site": "cross-site", "Origin": ts.URL},
			{"Origin": "http://evil.example"},
			{"Origin": "null"},
		} {
			if status, out := send("POST", "/v1/run", h); status != http.StatusForbidden || out.Error == nil || out.Error.Kind != "forbidden" {
				t.Errorf("token %q, POST with %v: status %d, %+v", token, h, status, out.Error)
			}
		}
		for _, h := range []map[string]string{nil, {"Sec-Fetch-Site": "same-origin"}, {"Sec-Fetch-Site": "none"}, {"Origin": ts.URL}} {
			if status, out := send("POST", "/v1/run", h); status != 200 || string(out.Value) != "42" {
				t.Errorf("token %q, POST with %v: status %d, %+v", token, h, status, out)
			}
		}
		if status, _ := send("GET", "/healthz", map[string]string{"Sec-Fetch-Site": "cross-site"}); status != 200 {
			t.Errorf("token %q, a cross-site GET /healthz: %d", token, status)
		}
	}
}

// TestHost: without a token the server answers only requests for a
// loopback name: any other Host is a page whose name was rebound to
// 127.0.0.1 (DNS rebinding). With a token, any Host is served.
func TestHost(t *testing.T) {
	ts := newServer(t, nil)
	tokened := newServer(t, &service.Options{Token: "tok"})
	send := func(url, host, method, path, token string) (int, service.Response, http.Header) {
		t.Helper()
		var body io.Reader
		if method == "POST" {
			body = strings.NewReader(`{"source": "6 * 7"}`)
		}
		req, _ := http.NewRequestWithContext(t.Context(), method, url+path, body)
		req.Host = host
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		return do(t, req)
	}
	for _, host := range []string{"evil.example", "evil.example:8080", "127.0.0.1.evil.example", "localhost.evil.example", "10.0.0.1", "[::]:80", "0.0.0.0", "[fe80::1%25lo]"} {
		for _, path := range []string{"/v1/run", "/healthz"} {
			method := map[string]string{"/v1/run": "POST", "/healthz": "GET"}[path]
			status, out, header := send(ts.URL, host, method, path, "")
			if status != http.StatusForbidden || out.Error == nil || out.Error.Kind != "forbidden" || !strings.Contains(out.Error.Message, "loopback") || header.Get("Connection") != "close" {
				t.Errorf("Host %q, %s %s: status %d, Connection %q, %+v", host, method, path, status, header.Get("Connection"), out.Error)
			}
		}
		if status, out, _ := send(tokened.URL, host, "POST", "/v1/run", "tok"); status != 200 || string(out.Value) != "42" {
			t.Errorf("Host %q with a token: status %d, %+v", host, status, out)
		}
	}
	for _, host := range []string{"localhost", "localhost:8080", "LocalHost:1", "127.0.0.1", "127.0.0.1:8080", "127.9.9.9:80", "[::1]", "[::1]:8080"} {
		if status, out, _ := send(ts.URL, host, "POST", "/v1/run", ""); status != 200 || string(out.Value) != "42" {
			t.Errorf("Host %q: status %d, %+v", host, status, out)
		}
	}
	if got := spinetest.Metrics(t, ts.URL, "")[`spine_errors_total{kind="forbidden"}`]; got != 16 {
		t.Errorf("forbidden = %v, want 16", got)
	}
}
