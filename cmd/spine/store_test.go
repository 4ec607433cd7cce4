package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"

	"github.com/spine-run/spine/internal/spinetest"
)

// sessionRun runs source in session id at url and wants 200 and value.
func sessionRun(t *testing.T, url, id, source, want string) {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"source": source})
	status, a, err := post(t, url+"/v1/sessions/"+id+"/run", string(body))
	if err != nil || status != 200 || string(a.Value) != want {
		t.Fatalf("%q in %s at %s: %v, status %d, %s, %+v; want %s", source, id, url, err, status, a.Value, a.Error, want)
	}
}

// stop sends SIGTERM to p and wants exit code 0.
func (p *process) stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t); code != 0 {
		t.Fatalf("exit code %d after SIGTERM", code)
	}
}

// TestServeStoreTwoProcesses runs two spine serve processes on one
// file:// store: one session id is served by both, its state carried from
// one to the other and back.
func TestServeStoreTwoProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the spine command")
	}
	bin := buildSpine(t)
	store := "file://" + t.TempDir()
	args := []string{"serve", "--listen", "127.0.0.1:0", "--session-memory", "128", "--session-store", store}
	a, addrA := start(t, bin, args...)
	b, addrB := start(t, bin, args...)
	urlA, urlB := "http://"+addrA, "http://"+addrB
	id := createSession(t, urlA)
	sessionRun(t, urlA, id, "x = ['a']", "null")
	sessionRun(t, urlB, id, "x.append('b')\nx", `["a","b"]`)
	sessionRun(t, urlA, id, "x.append('a')\nx", `["a","b","a"]`)
	sessionRun(t, urlB, id, "x", `["a","b","a"]`)
	a.stop(t)
	b.stop(t)
}

// TestServeRestartKeepsSessions: sessions made on a process, live and
// hibernated, are served again under the same ids by the next process after
// SIGTERM: with a store written only when the server stops, and with
// --session-dir alone.
func TestServeRestartKeepsSessions(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the spine command")
	}
	bin := buildSpine(t)
	for name, flags := range map[string][]string{
		"store":       {"--session-store", "file://" + t.TempDir(), "--session-write", "hibernate"},
		"session-dir": {"--session-dir", t.TempDir()},
	} {
		t.Run(name, func(t *testing.T) {
			args := append([]string{"serve", "--listen", "127.0.0.1:0", "--session-memory", "128", "--live-sessions", "1"}, flags...)
			first, addr := start(t, bin, args...)
			url := "http://" + addr
			ids := []string{createSession(t, url), createSession(t, url), createSession(t, url)}
			for i, id := range ids {
				sessionRun(t, url, id, "n = "+string(rune('1'+i)), "null") // one live, the others hibernated
			}
			first.stop(t)

			second, addr := start(t, bin, args...)
			url = "http://" + addr
			for i, id := range ids {
				sessionRun(t, url, id, "n * 10", string(rune('1'+i))+"0")
			}
			second.stop(t)
		})
	}
}

// TestServeDrain sends SIGTERM while a run that never ends is in flight:
// during the grace period /readyz is 503, /livez and /healthz 200, and a
// new run is refused 503 with Retry-After and the JSON error body; when the
// grace period ends the run in flight is answered 503 (never a dropped
// connection); the session it ran in is kept at its state before that
// run; the process exits 0.
func TestServeDrain(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the spine command")
	}
	bin := buildSpine(t)
	store := "file://" + t.TempDir()
	args := []string{"serve", "--listen", "127.0.0.1:0", "--session-memory", "128", "--session-store", store,
		"--grace", "8s", "--max-timeout", "5m"}
	p, addr := start(t, bin, args...)
	url := "http://" + addr
	id := createSession(t, url)
	sessionRun(t, url, id, "n = 1", "null")

	type result struct {
		status int
		answer serveAnswer
		err    error
	}
	results := make(chan result, 1)
	go func() {
		status, a, err := post(t, url+"/v1/sessions/"+id+"/run", `{"source": "n = 2\nwhile True: pass"}`)
		results <- result{status, a, err}
	}()
	spinetest.WaitFor(t, "the run to be in flight", func() bool { return spinetest.Metrics(t, url, "")["spine_runs_in_flight"] == 1 })
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	p.waitLine(t, "shutting down")

	for path, want := range map[string]int{"/readyz": 503, "/livez": 200, "/healthz": 200} {
		resp, err := http.Get(url + path)
		if err != nil {
			t.Fatalf("GET %s during the grace period: %v", path, err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s during the grace period: %d, want %d", path, resp.StatusCode, want)
		}
	}
	resp, err := http.Post(url+"/v1/run", "application/json", strings.NewReader(`{"source": "1"}`))
	if err != nil {
		t.Fatalf("a new run during the grace period: %v", err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var refused serveAnswer
	if err := json.Unmarshal(raw, &refused); err != nil || resp.StatusCode != 503 || refused.Error == nil || refused.Error.Kind != "closed" || resp.Header.Get("Retry-After") == "" {
		t.Errorf("a new run during the grace period: %d %s, Retry-After %q", resp.StatusCode, raw, resp.Header.Get("Retry-After"))
	}

	r := <-results
	if r.err != nil || r.status != 503 || r.answer.Error == nil || r.answer.Error.Kind != "closed" {
		t.Fatalf("the run cut at the end of the grace period: %v, status %d, %+v", r.err, r.status, r.answer.Error)
	}
	if code := p.wait(t); code != 0 {
		t.Fatalf("exit code %d", code)
	}

	next, addr := start(t, bin, args...)
	sessionRun(t, "http://"+addr, id, "n", "1")
	next.stop(t)
}

// TestServeStoreStaleProcess pauses a real replica (SIGSTOP) in the middle
// of a session's run, while another replica sharing the file:// store runs
// the session twice; woken (SIGCONT), the paused replica's run ends on the
// generation it had and its write is refused: 409 conflict, and the store
// keeps the other replica's state, which both then serve.
func TestServeStoreStaleProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the spine command")
	}
	bin := buildSpine(t)
	store := "file://" + t.TempDir()
	args := []string{"serve", "--listen", "127.0.0.1:0", "--session-memory", "128", "--session-store", store}
	paused, addrP := start(t, bin, args...)
	other, addrO := start(t, bin, args...)
	urlP, urlO := "http://"+addrP, "http://"+addrO
	id := createSession(t, urlP)
	sessionRun(t, urlP, id, "n = 0", "null")

	// The run prints once it is in the Guest, past its check of the store;
	// the event stream shows it before the run ends.
	body, _ := json.Marshal(map[string]string{"source": "import time\nprint('in the guest')\ntime.sleep(5)\nn = -1\nn"})
	req, _ := http.NewRequest("POST", urlP+"/v1/sessions/"+id+"/run", strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	events := bufio.NewReader(resp.Body)
	for {
		line, err := events.ReadString('\n')
		if err != nil {
			t.Fatalf("the event stream ended before the run printed: %v", err)
		}
		if strings.HasPrefix(line, "event: stdout") {
			break
		}
	}
	if err := paused.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	sessionRun(t, urlO, id, "n += 1", "null")
	sessionRun(t, urlO, id, "n += 1", "null")
	if err := paused.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	rest, err := io.ReadAll(events)
	if err != nil {
		t.Fatal(err)
	}
	_, data, ok := strings.Cut(string(rest), "event: result\ndata: ")
	var result struct {
		Status int
		Error  *struct{ Kind string }
	}
	if !ok || json.Unmarshal([]byte(strings.SplitN(data, "\n", 2)[0]), &result) != nil {
		t.Fatalf("no result event in %q", rest)
	}
	if result.Status == 200 {
		// Only if the run ended before the pause, and the other replica's
		// runs came after it.
		sessionRun(t, urlO, id, "n", "1")
		t.Skip("the run ended before the replica was paused: nothing was stale")
	}
	if result.Status != 409 || result.Error == nil || result.Error.Kind != "conflict" {
		t.Fatalf("the woken replica's run: %s", data)
	}
	sessionRun(t, urlP, id, "n", "2")
	sessionRun(t, urlO, id, "n", "2")
	paused.stop(t)
	other.stop(t)
}
