package service_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spine-run/spine/door"
	"github.com/spine-run/spine/internal/spinetest"
	"github.com/spine-run/spine/service"
)

// startStream opens a stream whose body the test writes; the answer arrives
// on the returned channel.
func startStream(t *testing.T, url string) (*io.PipeWriter, <-chan streamAnswer) {
	t.Helper()
	pr, pw := io.Pipe()
	t.Cleanup(func() { pw.Close() })
	req := streamRequest(t, url+"/v1/run/stream", pr)
	answers := make(chan streamAnswer, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			answers <- streamAnswer{err: err}
			return
		}
		defer resp.Body.Close()
		var a streamAnswer
		a.status = resp.StatusCode
		a.err = json.NewDecoder(resp.Body).Decode(&a.out)
		answers <- a
	}()
	return pw, answers
}

type streamAnswer struct {
	status int
	out    service.Response
	err    error
}

// TestStreamIdle: a stream that stops sending, or never sends, is ended by
// the idle limit, and its slot is freed.
func TestStreamIdle(t *testing.T) {
	ts := newServer(t, &service.Options{Slots: 2, StreamIdle: 100 * time.Millisecond, MaxTimeout: time.Hour})
	for _, first := range []string{"x = 1\n", ""} {
		pw, answers := startStream(t, ts.URL)
		if first != "" {
			if _, err := io.WriteString(pw, first); err != nil {
				t.Fatal(err)
			}
		}
		a := <-answers
		pw.Close()
		if a.err != nil || a.status != http.StatusRequestTimeout || a.out.Error == nil || a.out.Error.Kind != "stream_idle" ||
			!strings.Contains(a.out.Error.Message, "100ms") {
			t.Fatalf("first chunk %q: %v, status %d, %+v", first, a.err, a.status, a.out.Error)
		}
	}
	spinetest.WaitFor(t, "the slots to be free", func() bool { return scrape(t, ts.URL)["spine_runs_in_flight"] == 0 })
	metrics := scrape(t, ts.URL)
	if metrics[`spine_errors_total{kind="stream_idle"}`] != 2 || metrics[`spine_runs_total{outcome="stream_idle"}`] != 2 || metrics["spine_streams_in_flight"] != 0 {
		t.Errorf("stream_idle errors %v, runs %v, streams in flight %v", metrics[`spine_errors_total{kind="stream_idle"}`],
			metrics[`spine_runs_total{outcome="stream_idle"}`], metrics["spine_streams_in_flight"])
	}
	if status, out, _ := post(t, t.Context(), ts.URL+"/v1/run", run{"source": "1"}); status != 200 || string(out.Value) != "1" {
		t.Fatalf("after the idle streams: status %d, %+v", status, out)
	}
	// The limit is on waiting for the client, not on the run: a program
	// that runs longer than it once its stream has ended is not cut. Its
	// body is sent whole with the headers, so that no wait for it, however
	// busy the machine, can pass for an idle stream.
	req := streamRequest(t, ts.URL+"/v1/run/stream", strings.NewReader("import time\ntime.sleep(0.5)\n'slept'\n"))
	if status, out, _ := do(t, req); status != 200 || string(out.Value) != `"slept"` {
		t.Fatalf("a run longer than the idle limit: status %d, %+v", status, out)
	}
}

// TestStreamShare: streams that trickle hold only their share of the slots,
// so /v1/run still finds one; a stream past the share gets 429.
func TestStreamShare(t *testing.T) {
	ts := newServer(t, &service.Options{Slots: 4, StreamIdle: time.Hour, MaxTimeout: time.Hour})
	type stream struct {
		w       *io.PipeWriter
		answers <-chan streamAnswer
	}
	var streams []stream
	for range 2 {
		w, answers := startStream(t, ts.URL)
		streams = append(streams, stream{w, answers})
		for _, b := range []byte("a = 20\n") { // one byte at a time
			if _, err := w.Write([]byte{b}); err != nil {
				t.Fatal(err)
			}
		}
	}
	spinetest.WaitFor(t, "both streams to hold a slot", func() bool { return scrape(t, ts.URL)["spine_streams_in_flight"] == 2 })

	w, answers := startStream(t, ts.URL)
	a := <-answers
	w.Close()
	if a.err != nil || a.status != http.StatusTooManyRequests || a.out.Error == nil || a.out.Error.Kind != "overloaded" || !strings.Contains(a.out.Error.Message, "stream slots") {
		t.Fatalf("a third stream: %v, status %d, %+v", a.err, a.status, a.out.Error)
	}

	var wg sync.WaitGroup
	for i := range 2 {
		wg.Go(func() {
			status, out, _ := post(t, t.Context(), ts.URL+"/v1/run", run{"source": "inputs['i']", "inputs": map[string]any{"i": i}})
			if status != 200 || string(out.Value) != string(rune('0'+i)) {
				t.Errorf("/v1/run beside two streams: status %d, %+v", status, out)
			}
		})
	}
	wg.Wait()
	if m := scrape(t, ts.URL); m["spine_streams_in_flight"] != 2 {
		t.Fatalf("the streams ended early: %v in flight", m["spine_streams_in_flight"])
	}

	for i, s := range streams {
		if _, err := io.WriteString(s.w, "a + 1\n"); err != nil {
			t.Fatal(err)
		}
		s.w.Close()
		if a := <-s.answers; a.err != nil || a.status != 200 || string(a.out.Value) != "21" {
			t.Errorf("stream %d: %v, status %d, %+v", i, a.err, a.status, a.out)
		}
	}
	metrics := scrape(t, ts.URL)
	if metrics["spine_stream_slots"] != 2 || metrics[`spine_errors_total{kind="overloaded"}`] != 1 {
		t.Errorf("stream slots %v, overloaded %v", metrics["spine_stream_slots"], metrics[`spine_errors_total{kind="overloaded"}`])
	}
}

// lockedBuffer is a log destination for concurrent writers.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestLogsClipped: a program that writes a mebibyte to stderr and fails with
// a long message leaves its output whole in the answer, and only a short
// prefix of anything in the log.
func TestLogsClipped(t *testing.T) {
	var logs lockedBuffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ts := newServer(t, &service.Options{Logger: logger})
	status, out, _ := post(t, t.Context(), ts.URL+"/v1/run", run{
		"source": "import sys\nsys.stderr.write('e' * (1 << 20))\nraise ValueError('v' * (1 << 19))",
	})
	if status != http.StatusUnprocessableEntity || len(out.Stderr) != 1<<20 || out.Error == nil || len(out.Error.Message) < 60000 {
		t.Fatalf("status %d, stderr %d bytes, %v", status, len(out.Stderr), out.Error != nil)
	}
	text := logs.String()
	if len(text) > 2048 || !strings.Contains(text, fmt.Sprintf("… (%d bytes)", len(out.Error.Message))) || strings.Contains(text, strings.Repeat("v", door.MaxLogText+1)) {
		t.Errorf("the log holds %d bytes:\n%.3000s", len(text), text)
	}
}

// TestToken: with a token, every endpoint but /healthz needs it.
func TestToken(t *testing.T) {
	const token = "s3cret-token"
	ts := newServer(t, &service.Options{Token: token})
	contentType := map[string]string{"/v1/run": "application/json", "/v1/run/stream": "text/x-python"}
	send := func(method, path, auth, body string) (int, http.Header, []byte) {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), method, ts.URL+path, strings.NewReader(body))
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		if ct := contentType[path]; ct != "" {
			req.Header.Set("Content-Type", ct)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		if resp.Close { // net/http's client takes "Connection: close" out of the header
			resp.Header.Set("Connection", "close")
		}
		return resp.StatusCode, resp.Header, raw
	}
	runBody := `{"source": "6 * 7"}`
	for _, tc := range []struct{ method, path, body string }{
		{"POST", "/v1/run", runBody},
		{"POST", "/v1/run/stream", "6 * 7"},
		{"GET", "/metrics", ""},
	} {
		for _, auth := range []string{"", "Bearer wrong", "Bearer " + token + "x", "Basic " + token, token, "Bearer"} {
			status, header, raw := send(tc.method, tc.path, auth, tc.body)
			var out service.Response
			json.Unmarshal(raw, &out)
			// The connection is closed, with or without a body: a
			// client without the token holds no connection.
			if status != http.StatusUnauthorized || !strings.HasPrefix(header.Get("WWW-Authenticate"), "Bearer") || out.Error == nil || out.Error.Kind != "unauthorized" ||
				header.Get("Connection") != "close" {
				t.Errorf("%s %s with %q: status %d, WWW-Authenticate %q, Connection %q, %s", tc.method, tc.path, auth, status, header.Get("WWW-Authenticate"), header.Get("Connection"), raw)
			}
		}
		for _, auth := range []string{"Bearer " + token, "bearer  " + token} {
			if status, header, raw := send(tc.method, tc.path, auth, tc.body); status != 200 || (tc.path != "/v1/run/stream" && header.Get("Connection") != "") {
				t.Errorf("%s %s with the token (%q): status %d, Connection %q, %s", tc.method, tc.path, auth, status, header.Get("Connection"), raw)
			}
		}
	}
	// /healthz is open, but keeps no connection for a client without the token.
	for auth, closes := range map[string]bool{"": true, "Bearer wrong": true, "Bearer " + token: false} {
		status, header, raw := send("GET", "/healthz", auth, "")
		if status != 200 || !bytes.Contains(raw, []byte(`"status":"ok"`)) || (header.Get("Connection") == "close") != closes {
			t.Errorf("/healthz with %q: %d, Connection %q, %s", auth, status, header.Get("Connection"), raw)
		}
	}
	if got := spinetest.Metrics(t, ts.URL, token)[`spine_errors_total{kind="unauthorized"}`]; got != 18 {
		t.Errorf("unauthorized = %v, want 18", got)
	}
}

// TestHealthComponents: Options.Health's components show in /healthz, which
// says degraded (still 200) when one is unhealthy; without the token the
// error texts are hidden.
func TestHealthComponents(t *testing.T) {
	var mu sync.Mutex
	states := map[string]string{"github": "", "docs": ""}
	health := func() map[string]string {
		mu.Lock()
		defer mu.Unlock()
		out := make(map[string]string)
		for k, v := range states {
			out[k] = v
		}
		return out
	}
	get := func(url, token string) service.HealthReport {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), "GET", url+"/healthz", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var h service.HealthReport
		if err := json.NewDecoder(resp.Body).Decode(&h); err != nil || resp.StatusCode != 200 {
			t.Fatalf("status %d: %v", resp.StatusCode, err)
		}
		return h
	}
	ts := newServer(t, &service.Options{Slots: 4, Health: health})
	if h := get(ts.URL, ""); h.Status != "ok" || h.Components["github"] != "ok" || h.Components["docs"] != "ok" || h.Slots != 4 || h.StreamSlots != 2 {
		t.Errorf("healthy: %+v", h)
	}
	mu.Lock()
	states["docs"] = "dial tcp 10.0.0.7:9000: connection refused " + strings.Repeat("x", 500)
	mu.Unlock()
	h := get(ts.URL, "")
	if h.Status != "degraded" || h.Components["github"] != "ok" || !strings.HasPrefix(h.Components["docs"], "dial tcp 10.0.0.7:9000: connection refused") || len(h.Components["docs"]) > door.MaxLogText+20 {
		t.Errorf("degraded: %+v", h)
	}

	// /readyz stays ready, and names the component that is down.
	resp, err := http.Get(ts.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	var ready door.Probe
	json.NewDecoder(resp.Body).Decode(&ready)
	resp.Body.Close()
	if resp.StatusCode != 200 || ready.Status != "ready" || !slices.Equal(ready.Down, []string{"docs"}) {
		t.Errorf("/readyz with docs down: %d %+v", resp.StatusCode, ready)
	}

	tokened := newServer(t, &service.Options{Health: health, Token: "tok"})
	if h := get(tokened.URL, ""); h.Status != "degraded" || h.Components["docs"] != "unhealthy" || h.Components["github"] != "ok" {
		t.Errorf("without the token: %+v", h)
	}
	if h := get(tokened.URL, "tok"); !strings.HasPrefix(h.Components["docs"], "dial tcp") {
		t.Errorf("with the token: %+v", h)
	}

	// Without Options.Health there are no components.
	if h := get(newServer(t, nil).URL, ""); h.Status != "ok" || h.Components != nil {
		t.Errorf("no Health: %+v", h)
	}
}
