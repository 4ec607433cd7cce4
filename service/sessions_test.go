package service_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/internal/spinetest"
	"github.com/spine-run/spine/service"
)

// newSessionServer returns a Server over r (nil: the shared runner) and its
// test server; the Server's sessions are closed when the test ends.
func newSessionServer(t *testing.T, r *spine.Runner, opts *service.Options) (*service.Server, *httptest.Server) {
	t.Helper()
	if r == nil {
		r = runner
	}
	svc := service.New(r, opts)
	ts := spinetest.ServeHTTP(t, svc)
	t.Cleanup(func() { svc.Close(context.Background()) })
	return svc, ts
}

// client sends requests to a test server, with a token when set.
type client struct {
	t     *testing.T
	url   string
	token string
}

// send sends a request and returns the status, the body and the header.
func (c client) send(method, path, contentType string, body []byte, header ...string) (int, []byte, http.Header) {
	c.t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(c.t.Context(), method, c.url+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	return resp.StatusCode, raw, resp.Header
}

// answer decodes the JSON answer of a run or of a refused request.
func (c client) answer(status int, raw []byte) service.Response {
	c.t.Helper()
	var out service.Response
	if err := json.Unmarshal(raw, &out); err != nil {
		c.t.Fatalf("status %d, body %q: %v", status, raw, err)
	}
	return out
}

// create makes a session and returns its id.
func (c client) create() string {
	c.t.Helper()
	status, raw, header := c.send("POST", "/v1/sessions", "", nil)
	var info service.SessionInfo
	if err := json.Unmarshal(raw, &info); err != nil || status != http.StatusCreated {
		c.t.Fatalf("POST /v1/sessions: status %d, %s", status, raw)
	}
	if id, err := hex.DecodeString(info.ID); err != nil || len(id) < 16 {
		c.t.Errorf("session id %q: not 128 bits or more in hex", info.ID)
	}
	if loc := header.Get("Location"); loc != "/v1/sessions/"+info.ID {
		c.t.Errorf("Location %q", loc)
	}
	return info.ID
}

// run runs source in session id.
func (c client) run(id, source string) (int, service.Response) {
	c.t.Helper()
	body, _ := json.Marshal(run{"source": source})
	status, raw, _ := c.send("POST", "/v1/sessions/"+id+"/run", "application/json", body)
	return status, c.answer(status, raw)
}

// mustRun runs source in session id and returns its value.
func (c client) mustRun(id, source string) string {
	c.t.Helper()
	status, out := c.run(id, source)
	if status != 200 || out.Error != nil {
		c.t.Fatalf("run %q in %s: status %d, %+v", source, id, status, out.Error)
	}
	return string(out.Value)
}

// snapshot returns session id's snapshot.
func (c client) snapshot(id string) []byte {
	c.t.Helper()
	status, raw, header := c.send("GET", "/v1/sessions/"+id+"/snapshot", "", nil)
	if status != 200 || header.Get("Content-Type") != "application/octet-stream" || header.Get("Cache-Control") != "no-store" {
		c.t.Fatalf("snapshot: status %d, Content-Type %q, Cache-Control %q, %.200q", status, header.Get("Content-Type"), header.Get("Cache-Control"), raw)
	}
	return raw
}

// restore posts blob to /v1/sessions/restore and returns the status and
// the id (or the error of a refused one).
func (c client) restore(blob []byte) (int, string, *service.Error) {
	c.t.Helper()
	status, raw, _ := c.send("POST", "/v1/sessions/restore", "application/octet-stream", blob)
	if status == http.StatusCreated {
		var info service.SessionInfo
		if err := json.Unmarshal(raw, &info); err != nil {
			c.t.Fatalf("restore: %s: %v", raw, err)
		}
		return status, info.ID, nil
	}
	return status, "", c.answer(status, raw).Error
}

// wantError checks that status and out are the refusal of a session
// request: the status, the kind.
func wantError(t *testing.T, what string, status int, out service.Response, wantStatus int, wantKind string) {
	t.Helper()
	if status != wantStatus || out.Error == nil || out.Error.Kind != wantKind || out.Error.Message == "" || string(out.Value) != "null" {
		t.Errorf("%s: status %d, %+v; want %d %s", what, status, out.Error, wantStatus, wantKind)
	}
}

// TestSessionRun: a session keeps what one run defines for the next, and
// only for itself.
func TestSessionRun(t *testing.T) {
	_, ts := newSessionServer(t, nil, nil)
	c := client{t: t, url: ts.URL}
	id := c.create()
	if v := c.mustRun(id, "x = 41"); v != "null" {
		t.Errorf("x = 41: value %s", v)
	}
	if v := c.mustRun(id, "result = x + 1"); v != "42" {
		t.Errorf("result = x + 1: %s, want 42", v)
	}
	// A run's answer is /v1/run's: output, tool calls, a Python error that
	// does not end the session.
	status, out := c.run(id, "print('p', lookup(key='book'))\ny = x / 0")
	if status != 422 || out.Error == nil || out.Error.Type != "ZeroDivisionError" || out.Error.Line != 2 || out.Stdout != "p 21\n" || out.ToolCalls != 1 {
		t.Errorf("a Python error: status %d, %+v", status, out)
	}
	if v := c.mustRun(id, "x"); v != "41" {
		t.Errorf("after the error: x = %s", v)
	}
	// Another session, and a pooled run, do not see x.
	other := c.create()
	if status, out := c.run(other, "x"); status != 422 || out.Error == nil || out.Error.Type != "NameError" {
		t.Errorf("x in another session: status %d, %+v", status, out.Error)
	}
	if status, out, _ := post(t, t.Context(), ts.URL+"/v1/run", run{"source": "x"}); status != 422 || out.Error == nil || out.Error.Type != "NameError" {
		t.Errorf("x in a pooled run: status %d, %+v", status, out.Error)
	}
	// The body's checks are /v1/run's.
	for _, body := range []string{`{"sauce": "1"}`, `{"source": ""}`, `{"source": "1", "inputs": [1]}`, `{`} {
		status, raw, _ := c.send("POST", "/v1/sessions/"+id+"/run", "application/json", []byte(body))
		wantError(t, body, status, c.answer(status, raw), 400, "bad_request")
	}
	if got := c.mustRun(id, "x"); got != "41" {
		t.Errorf("after the bad requests: x = %s", got)
	}
	metrics := scrape(t, ts.URL)
	if metrics[`spine_session_operations_total{operation="create",outcome="ok"}`] != 2 || metrics["spine_server_sessions"] != 2 || metrics["spine_sessions"] < 2 {
		t.Errorf("created %v, server sessions %v, Runner sessions %v", metrics[`spine_session_operations_total{operation="create",outcome="ok"}`], metrics["spine_server_sessions"], metrics["spine_sessions"])
	}
	if metrics[`spine_runs_total{outcome="ok"}`] != 4 || metrics[`spine_runs_total{outcome="python"}`] != 3 {
		t.Errorf("runs ok %v, python %v", metrics[`spine_runs_total{outcome="ok"}`], metrics[`spine_runs_total{outcome="python"}`])
	}
}

// TestSessionSnapshotRestore: a restored session goes on from its
// snapshot, apart from the session it was taken from.
func TestSessionSnapshotRestore(t *testing.T) {
	_, ts := newSessionServer(t, nil, nil)
	c := client{t: t, url: ts.URL}
	id := c.create()
	c.mustRun(id, "x = 41\ndef inc():\n    global x\n    x += 1\n    return x")
	blob := c.snapshot(id)
	status, restored, e := c.restore(blob)
	if status != http.StatusCreated || restored == id {
		t.Fatalf("restore: status %d, id %q (original %q), %+v", status, restored, id, e)
	}
	if v := c.mustRun(restored, "inc()"); v != "42" {
		t.Errorf("restored: inc() = %s, want 42", v)
	}
	if v := c.mustRun(id, "inc()"); v != "42" {
		t.Errorf("original: inc() = %s, want 42", v)
	}
	if v := c.mustRun(restored, "inc()"); v != "43" {
		t.Errorf("restored, again: inc() = %s, want 43", v)
	}
	if v := c.mustRun(id, "x"); v != "42" {
		t.Errorf("original after the restored ran: x = %s, want 42", v)
	}
	if got := scrape(t, ts.URL)[`spine_session_operations_total{operation="restore",outcome="ok"}`]; got != 1 {
		t.Errorf("restores %v", got)
	}
}

// TestSessionDelete: a deleted session, like an unknown id, is 404 to
// every endpoint.
func TestSessionDelete(t *testing.T) {
	_, ts := newSessionServer(t, nil, nil)
	c := client{t: t, url: ts.URL}
	before := runner.SessionStats().Sessions
	id := c.create()
	c.mustRun(id, "x = 1")
	if status, raw, _ := c.send("DELETE", "/v1/sessions/"+id, "", nil); status != http.StatusNoContent || len(raw) != 0 {
		t.Fatalf("DELETE: status %d, %q", status, raw)
	}
	if got := runner.SessionStats().Sessions; got != before {
		t.Errorf("the Runner holds %d sessions, %d before", got, before)
	}
	for _, gone := range []string{id, "00112233445566778899aabbccddeeff", "restore-not", "x"} {
		status, out := c.run(gone, "1")
		wantError(t, "run in "+gone, status, out, 404, "not_found")
		status, raw, _ := c.send("GET", "/v1/sessions/"+gone+"/snapshot", "", nil)
		wantError(t, "snapshot of "+gone, status, c.answer(status, raw), 404, "not_found")
		status, raw, _ = c.send("DELETE", "/v1/sessions/"+gone, "", nil)
		wantError(t, "DELETE "+gone, status, c.answer(status, raw), 404, "not_found")
	}
	metrics := scrape(t, ts.URL)
	if metrics["spine_server_sessions"] != 0 || metrics[`spine_errors_total{kind="not_found"}`] != 12 || metrics[`spine_session_operations_total{operation="delete",outcome="ok"}`] != 1 {
		t.Errorf("server sessions %v, not_found %v, deletes %v", metrics["spine_server_sessions"], metrics[`spine_errors_total{kind="not_found"}`], metrics[`spine_session_operations_total{operation="delete",outcome="ok"}`])
	}
}

// TestSessionOwner: a session belongs to the token that made it; to
// another token it does not exist, with the same answer as an unknown id.
// TestSessionsPerToken: one client cannot take more than its share.
func TestSessionsPerToken(t *testing.T) {
	_, ts := newSessionServer(t, nil, &service.Options{Token: "token-a", Tokens: []string{"token-b"}, SessionsPerToken: 1})
	a := client{t: t, url: ts.URL, token: "token-a"}
	b := client{t: t, url: ts.URL, token: "token-b"}
	first := a.create()
	status, raw, _ := a.send("POST", "/v1/sessions", "", nil)
	wantError(t, "a's second session", status, a.answer(status, raw), http.StatusServiceUnavailable, "too_many_sessions")
	b.mustRun(b.create(), "1")
	status, raw, _ = a.send("DELETE", "/v1/sessions/"+first, "", nil)
	if status != http.StatusNoContent {
		t.Fatalf("delete: %d %s", status, raw)
	}
	a.mustRun(a.create(), "1")
}

func TestSessionOwner(t *testing.T) {
	_, ts := newSessionServer(t, nil, &service.Options{Token: "token-a", Tokens: []string{"token-b"}})
	a := client{t: t, url: ts.URL, token: "token-a"}
	b := client{t: t, url: ts.URL, token: "token-b"}
	id := a.create()
	a.mustRun(id, "secret = 'of a'")
	blob := a.snapshot(id)

	_, unknown := b.run("00112233445566778899aabbccddeeff", "1")
	status, out := b.run(id, "secret")
	wantError(t, "b runs in a's session", status, out, 404, "not_found")
	if out.Error != nil && unknown.Error != nil && out.Error.Message != unknown.Error.Message {
		t.Errorf("b's answer for a's session %q differs from an unknown id's %q", out.Error.Message, unknown.Error.Message)
	}
	status, raw, _ := b.send("GET", "/v1/sessions/"+id+"/snapshot", "", nil)
	wantError(t, "b snapshots a's session", status, b.answer(status, raw), 404, "not_found")
	status, raw, _ = b.send("DELETE", "/v1/sessions/"+id, "", nil)
	wantError(t, "b deletes a's session", status, b.answer(status, raw), 404, "not_found")

	// b's own session, and a restore of a's snapshot, are b's.
	mine := b.create()
	if status, out := a.run(mine, "1"); status != 404 || out.Error == nil || out.Error.Kind != "not_found" {
		t.Errorf("a runs in b's session: status %d, %+v", status, out.Error)
	}
	status, copied, _ := b.restore(blob)
	if status != http.StatusCreated {
		t.Fatalf("b restores a's snapshot: %d", status)
	}
	if v := b.mustRun(copied, "secret"); v != `"of a"` {
		t.Errorf("b's restored copy: %s", v)
	}
	// a's session is untouched, and still a's.
	if v := a.mustRun(id, "secret"); v != `"of a"` {
		t.Errorf("a's session after b's attempts: %s", v)
	}
	// Without a token: 401, as everywhere.
	nobody := client{t: t, url: ts.URL}
	if status, _, _ := nobody.send("POST", "/v1/sessions/"+id+"/run", "application/json", []byte(`{"source": "secret"}`)); status != 401 {
		t.Errorf("no token: status %d", status)
	}
}

// TestSessionRestoreErrors: what is not a snapshot, or is one of another
// Runner's, is 400 bad_snapshot; a snapshot must come as
// application/octet-stream, within MaxSnapshot.
func TestSessionRestoreErrors(t *testing.T) {
	_, ts := newSessionServer(t, nil, &service.Options{MaxSnapshot: 1 << 20})
	c := client{t: t, url: ts.URL}
	id := c.create()
	c.mustRun(id, "x = 1")
	blob := c.snapshot(id)
	damaged := bytes.Clone(blob)
	damaged[len(damaged)/2] ^= 1
	for name, bad := range map[string][]byte{
		"empty":     {},
		"text":      []byte("not a snapshot"),
		"truncated": blob[:len(blob)-1],
		"damaged":   damaged,
	} {
		status, _, e := c.restore(bad)
		if status != http.StatusBadRequest || e == nil || e.Kind != "bad_snapshot" || !strings.Contains(e.Message, "snapshot") {
			t.Errorf("%s: status %d, %+v", name, status, e)
		}
	}
	for _, ct := range []string{"", "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "application/json"} {
		status, raw, _ := c.send("POST", "/v1/sessions/restore", ct, blob)
		out := c.answer(status, raw)
		wantError(t, "restore as "+ct, status, out, http.StatusUnsupportedMediaType, "unsupported_media_type")
		if out.Error != nil && !strings.Contains(out.Error.Message, "application/octet-stream") {
			t.Errorf("restore as %q: %q does not name the type", ct, out.Error.Message)
		}
	}
	status, _, e := c.restore(make([]byte, 1<<20+1))
	if status != http.StatusRequestEntityTooLarge || e == nil || e.Kind != "too_large" {
		t.Errorf("over MaxSnapshot: status %d, %+v", status, e)
	}
	if got := scrape(t, ts.URL)[`spine_errors_total{kind="bad_snapshot"}`]; got != 4 {
		t.Errorf("bad_snapshot errors %v, want 4", got)
	}
}

// TestSessionOtherRunner: a snapshot of a Runner with another tool list is
// 400 bad_snapshot; past SessionOptions.Max, a create is 503
// too_many_sessions.
func TestSessionOtherRunner(t *testing.T) {
	if testing.Short() {
		t.Skip("prepares a second Runner's image")
	}
	manifest := tools.Manifest()
	manifest["extra"] = spine.ToolSpec{Call: func(context.Context, json.RawMessage) (any, error) { return 1, nil }}
	other := spinetest.NewRunner(t, manifest, &spine.Options{PoolSize: -1, Sessions: spine.SessionOptions{Max: 1}})
	_, ots := newSessionServer(t, other, nil)
	oc := client{t: t, url: ots.URL}
	id := oc.create()
	oc.mustRun(id, "x = extra()")
	status, raw, header := oc.send("POST", "/v1/sessions", "", nil)
	wantError(t, "a second session past Max", status, oc.answer(status, raw), http.StatusServiceUnavailable, "too_many_sessions")
	if header.Get("Retry-After") == "" {
		t.Error("too_many_sessions without Retry-After")
	}
	blob := oc.snapshot(id)

	_, ts := newSessionServer(t, nil, nil)
	c := client{t: t, url: ts.URL}
	status, _, e := c.restore(blob)
	if status != http.StatusBadRequest || e == nil || e.Kind != "bad_snapshot" || !strings.Contains(e.Message, "tool list") {
		t.Errorf("another Runner's snapshot: status %d, %+v", status, e)
	}
}

// TestSessionLost: a run that does not end cleanly loses its session: the
// run is answered as /v1/run's (408), later requests 410 Gone.
func TestSessionLost(t *testing.T) {
	_, ts := newSessionServer(t, nil, nil)
	c := client{t: t, url: ts.URL}
	id := c.create()
	// A run out of time is interrupted (KeyboardInterrupt): the session
	// keeps what it left. (The loop never ends: the time limit is certain.)
	endless := func() {
		t.Helper()
		body, _ := json.Marshal(run{"source": "x = 1\nwhile True:\n    pass", "timeout_ms": 100})
		status, raw, _ := c.send("POST", "/v1/sessions/"+id+"/run", "application/json", body)
		wantError(t, "the endless run", status, c.answer(status, raw), http.StatusRequestTimeout, "timeout")
	}
	c.mustRun(id, "x = 0")
	endless()
	c.mustRun(id, "x")
	// A program that will not stop (its SIGINT handler swallows the
	// interrupt) is stopped by force, and the session is lost.
	c.mustRun(id, "import signal\n_ = signal.signal(signal.SIGINT, lambda *args: None)")
	endless()
	status, out := c.run(id, "1")
	wantError(t, "a run after", status, out, http.StatusGone, "session_gone")
	status, raw, _ := c.send("GET", "/v1/sessions/"+id+"/snapshot", "", nil)
	wantError(t, "a snapshot after", status, c.answer(status, raw), http.StatusGone, "session_gone")
	if status, _, _ := c.send("DELETE", "/v1/sessions/"+id, "", nil); status != http.StatusNoContent {
		t.Errorf("DELETE of the lost session: %d", status)
	}
	if got := scrape(t, ts.URL)[`spine_runs_total{outcome="session_gone"}`]; got != 1 {
		t.Errorf("session_gone runs %v", got)
	}
}

// TestSessionConcurrent: a run sent while the session's previous one is in
// flight waits for it, holding no slot (the one slot is the first run's),
// and runs after it.
func TestSessionConcurrent(t *testing.T) {
	_, ts := newSessionServer(t, nil, &service.Options{Slots: 1})
	c := client{t: t, url: ts.URL}
	id := c.create()
	c.mustRun(id, "log = []")
	type answer struct {
		status int
		out    service.Response
	}
	first, second := make(chan answer, 1), make(chan answer, 1)
	go func() {
		status, out := c.run(id, "log.append('a')\ngate()\nlog.append('a2')")
		first <- answer{status, out}
	}()
	<-tools.Gate.Entered
	go func() {
		status, out := c.run(id, "log.append('b')\nlog")
		second <- answer{status, out}
	}()
	spinetest.WaitFor(t, "the second run to wait for the first", func() bool {
		return scrape(t, ts.URL)["spine_session_requests_waiting"] == 1
	})
	// Meanwhile the session's other requests wait too, but other sessions
	// and the pool are only short of the slot.
	if status, out, _ := post(t, t.Context(), ts.URL+"/v1/run", run{"source": "1"}); status != http.StatusTooManyRequests || out.Error == nil || out.Error.Kind != "overloaded" {
		t.Errorf("a pooled run while the slot is held: status %d, %+v", status, out.Error)
	}
	tools.Gate.Let()
	if a := <-first; a.status != 200 || a.out.Error != nil {
		t.Fatalf("first run: status %d, %+v", a.status, a.out.Error)
	}
	if a := <-second; a.status != 200 || string(a.out.Value) != `["a","a2","b"]` {
		t.Fatalf("second run: status %d, %s, %+v", a.status, a.out.Value, a.out.Error)
	}
	// Many at once: each run waits for the one before, and sees it. Only
	// the run whose turn it is holds a slot, so none is refused.
	_, ts = newSessionServer(t, nil, &service.Options{Slots: 2})
	c = client{t: t, url: ts.URL}
	id = c.create()
	c.mustRun(id, "n = 0")
	const runs = 8
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		seen = map[string]bool{}
	)
	for range runs {
		wg.Go(func() {
			status, out := c.run(id, "n += 1\nn")
			if status != 200 {
				t.Errorf("status %d, %+v", status, out.Error)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if seen[string(out.Value)] {
				t.Errorf("two runs saw n = %s", out.Value)
			}
			seen[string(out.Value)] = true
		})
	}
	wg.Wait()
	if v := c.mustRun(id, "n"); v != fmt.Sprint(runs) || len(seen) != runs {
		t.Errorf("n = %s after %d runs that saw %v", v, runs, seen)
	}
}

// TestSessionDeleteDuringRun: DELETE stops a run in flight; that run is
// answered 404, as its session is gone.
func TestSessionDeleteDuringRun(t *testing.T) {
	_, ts := newSessionServer(t, nil, nil)
	c := client{t: t, url: ts.URL}
	id := c.create()
	answers := make(chan service.Response, 1)
	statuses := make(chan int, 1)
	go func() {
		status, out := c.run(id, "gate()")
		statuses <- status
		answers <- out
	}()
	<-tools.Gate.Entered
	if status, _, _ := c.send("DELETE", "/v1/sessions/"+id, "", nil); status != http.StatusNoContent {
		t.Fatalf("DELETE: %d", status)
	}
	wantError(t, "the run in flight", <-statuses, <-answers, 404, "not_found")
}

// TestSessionTTL: a session the Runner closes after its SessionOptions.TTL
// is 404 from then on, and the next create drops it from the Server's table.
func TestSessionTTL(t *testing.T) {
	r, err := spine.New(t.Context(), spinetest.NewTools().Manifest(), &spine.Options{PoolSize: -1, Sessions: spine.SessionOptions{TTL: time.Nanosecond}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(context.Background()) })
	_, ts := newSessionServer(t, r, nil)
	c := client{t: t, url: ts.URL}
	id := c.create()
	// The Runner's sweeper closes the session unused for a nanosecond the
	// next time it looks (every 10 ms): no deadline here, only the state.
	spinetest.WaitFor(t, "the Runner to close the session", func() bool { return r.SessionStats().Sessions == 0 })
	spinetest.WaitFor(t, "the server to count it gone", func() bool {
		c.create()
		return scrape(t, ts.URL)["spine_server_sessions"] <= 1
	})
	status, out := c.run(id, "1")
	wantError(t, "the expired session", status, out, 404, "not_found")
}

// TestSessionClose: Server.Close ends the Server's sessions; the session
// endpoints then answer 503.
func TestSessionClose(t *testing.T) {
	svc, ts := newSessionServer(t, nil, nil)
	c := client{t: t, url: ts.URL}
	before := runner.SessionStats().Sessions
	id := c.create()
	c.create()
	if err := svc.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := runner.SessionStats().Sessions; got != before {
		t.Errorf("the Runner holds %d sessions after Close, %d before", got, before)
	}
	status, out := c.run(id, "1")
	wantError(t, "run after Close", status, out, http.StatusServiceUnavailable, "closed")
	status, raw, _ := c.send("POST", "/v1/sessions", "", nil)
	wantError(t, "create after Close", status, c.answer(status, raw), http.StatusServiceUnavailable, "closed")
	if status, out, _ := post(t, t.Context(), ts.URL+"/v1/run", run{"source": "6 * 7"}); status != 200 || string(out.Value) != "42" {
		t.Errorf("/v1/run after Close: status %d, %+v", status, out)
	}
}

// TestSessionBrowser: the session endpoints refuse what a web page can send
// without the server's consent: another origin's requests, and bodies of the
// types a form sends.
func TestSessionBrowser(t *testing.T) {
	_, ts := newSessionServer(t, nil, nil)
	c := client{t: t, url: ts.URL}
	id := c.create()
	blob := c.snapshot(id)
	for _, tc := range []struct {
		method, path, contentType string
		body                      []byte
	}{
		{"POST", "/v1/sessions", "", nil},
		{"POST", "/v1/sessions/" + id + "/run", "application/json", []byte(`{"source": "1"}`)},
		{"POST", "/v1/sessions/restore", "application/octet-stream", blob},
		{"DELETE", "/v1/sessions/" + id, "", nil},
	} {
		status, raw, _ := c.send(tc.method, tc.path, tc.contentType, tc.body, "Sec-Fetch-Site", "cross-site")
		wantError(t, tc.method+" "+tc.path+" cross-site", status, c.answer(status, raw), http.StatusForbidden, "forbidden")
	}
	for _, tc := range []struct{ contentType, body string }{
		{"application/x-www-form-urlencoded", ""},
		{"text/plain", ""},
		{"multipart/form-data; boundary=x", ""},
		{"", "{}"},
		{"text/plain", "{}"},
	} {
		status, raw, _ := c.send("POST", "/v1/sessions", tc.contentType, []byte(tc.body))
		wantError(t, "create as "+tc.contentType+" with "+tc.body, status, c.answer(status, raw), http.StatusUnsupportedMediaType, "unsupported_media_type")
	}
	for _, ct := range []string{"", "text/plain", "application/x-www-form-urlencoded", "text/x-python"} {
		status, raw, _ := c.send("POST", "/v1/sessions/"+id+"/run", ct, []byte(`{"source": "1"}`))
		wantError(t, "run as "+ct, status, c.answer(status, raw), http.StatusUnsupportedMediaType, "unsupported_media_type")
	}
	// What a client sends: no body, or {} as JSON.
	if status, raw, _ := c.send("POST", "/v1/sessions", "application/json", []byte("{}")); status != http.StatusCreated {
		t.Errorf("create with {}: status %d, %s", status, raw)
	}
	status, raw, _ := c.send("POST", "/v1/sessions", "application/json", []byte(`{"memory": 1}`))
	wantError(t, "create with a field", status, c.answer(status, raw), http.StatusBadRequest, "bad_request")
	c.mustRun(id, "1")
}
