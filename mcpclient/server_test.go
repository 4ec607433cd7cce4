package mcpclient_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spine-run/spine"
	"github.com/spine-run/spine/mcpclient"
	"github.com/spine-run/spine/mcpclient/internal/testtools"
)

// dialer gives a Server its transports: each a new process of the test
// server (mode is serverEnv's value), or a URL. Every connection after the
// first waits for a token on gate, so that a test sees the server down for as
// long as it likes.
type dialer struct {
	mode string
	url  string
	gate chan struct{}

	mu   sync.Mutex
	cmds []*exec.Cmd
	n    int
}

func newDialer(mode string) *dialer { return &dialer{mode: mode, gate: make(chan struct{})} }

func (d *dialer) transport() mcp.Transport {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.n++
	var t mcp.Transport
	if d.url != "" {
		t = &mcp.StreamableClientTransport{Endpoint: d.url, DisableStandaloneSSE: true}
	} else {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), serverEnv+"="+d.mode, "SPINE_TEST_GREETING=hello from the server")
		cmd.Stderr = os.Stderr
		d.cmds = append(d.cmds, cmd)
		t = &mcp.CommandTransport{Command: cmd, TerminateDuration: time.Second}
	}
	if d.n == 1 {
		return t
	}
	return gated{t, d.gate}
}

// connections is how many transports the Server asked for.
func (d *dialer) connections() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.n
}

func (d *dialer) cmd(i int) *exec.Cmd {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cmds[i]
}

// dial connects a Server under namespace "srv"; the test closes it, and
// checks that every process it started has been waited for.
func (d *dialer) dial(t *testing.T) *mcpclient.Server {
	t.Helper()
	s, err := mcpclient.Dial(t.Context(), d.transport, "srv", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Close()
		d.mu.Lock()
		defer d.mu.Unlock()
		for i, cmd := range d.cmds {
			if cmd.Process != nil && cmd.ProcessState == nil {
				t.Errorf("process %d (pid %d) was not waited for", i, cmd.Process.Pid)
			}
		}
	})
	return s
}

// gated connects once it gets a token, or fails when ctx ends first.
type gated struct {
	mcp.Transport
	gate chan struct{}
}

func (g gated) Connect(ctx context.Context) (mcp.Connection, error) {
	select {
	case <-g.gate:
		return g.Transport.Connect(ctx)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func callTool(t *testing.T, s *mcpclient.Server, name, args string) (any, error) {
	t.Helper()
	return call(t, s.Tools(), name, args)
}

// waitUp polls until s has a session.
func waitUp(t *testing.T, s *mcpclient.Server) {
	t.Helper()
	for s.Err() != nil {
		time.Sleep(5 * time.Millisecond)
	}
}

// checkDown checks that err is s's DownError and has want in its text.
func checkDown(t *testing.T, what string, err error, want string) {
	t.Helper()
	var down *mcpclient.DownError
	if !errors.As(err, &down) || down.Server != "srv" ||
		!strings.HasPrefix(err.Error(), "mcp server srv is down: ") || !strings.HasSuffix(err.Error(), "; reconnecting") ||
		!strings.Contains(err.Error(), want) {
		t.Fatalf("%s: err = %v, want a DownError of srv with %q", what, err, want)
	}
}

func checkEcho(t *testing.T, s *mcpclient.Server) {
	t.Helper()
	if v, err := callTool(t, s, "srv.echo", `{"text": "ok"}`); err != nil || v != "ok" {
		t.Fatalf("echo: %v, %v", v, err)
	}
}

// TestServerKilled: the server's process is killed with a call in flight;
// that call and the calls made while the server is down fail at once, naming
// the server and the cause; once a new process is up, calls work again.
func TestServerKilled(t *testing.T) {
	goroutines := runtime.NumGoroutine()
	d := newDialer("1")
	s := d.dial(t)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	checkEcho(t, s)

	// A call in flight when the process dies fails with the server's name.
	// (Its cause depends on whether the call was written before the process
	// died: the connection closed, or a broken pipe.)
	inFlight := make(chan error, 1)
	go func() {
		_, err := s.Tools()["srv.slow"].Call(t.Context(), json.RawMessage(`{"ms": 3600000}`))
		inFlight <- err
	}()
	if err := d.cmd(0).Process.Kill(); err != nil {
		t.Fatal(err)
	}
	checkDown(t, "the call in flight", <-inFlight, "")
	_, err := callTool(t, s, "srv.echo", `{"text": "x"}`)
	checkDown(t, "a call while down", err, "")
	d.gate <- struct{}{} // let the reconnection through
	waitUp(t, s)
	checkEcho(t, s)
	if v, err := callTool(t, s, "srv.getenv", `{"name": "SPINE_TEST_GREETING"}`); err != nil || v != "hello from the server" {
		t.Fatalf("getenv after the restart: %v, %v", v, err)
	}
	if d.cmd(1).Process.Pid == d.cmd(0).Process.Pid {
		t.Fatal("no new process")
	}

	// Killed with no call in flight: the cause is the process's end.
	if err := d.cmd(1).Process.Kill(); err != nil {
		t.Fatal(err)
	}
	for s.Err() == nil {
		time.Sleep(5 * time.Millisecond)
	}
	checkDown(t, "Err", s.Err(), "the server process ended: signal: killed")
	_, err = callTool(t, s, "srv.echo", `{"text": "x"}`)
	checkDown(t, "a call while down", err, "the server process ended: signal: killed")
	d.gate <- struct{}{}
	waitUp(t, s)
	checkEcho(t, s)

	s.Close()
	if _, err := callTool(t, s, "srv.echo", `{"text": "x"}`); !errors.Is(err, mcpclient.ErrClosed) {
		t.Fatalf("a call after Close: %v", err)
	}
	s.Close() // twice is fine
	// Nothing of the Server runs any more.
	for runtime.NumGoroutine() > goroutines {
		time.Sleep(5 * time.Millisecond)
	}
}

// TestServerBadResponse: a server that answers with what the client cannot
// decode loses its session; the call fails with the cause, the server is
// reconnected, and later calls work. A response that breaks only its own call
// leaves the session as it is.
func TestServerBadResponse(t *testing.T) {
	d := newDialer("misbehave")
	s := d.dial(t)
	for _, c := range []struct{ mode, want string }{
		{"garbage", "the server sent a message that is not valid JSON: invalid character 'h' in literal true"},
		{"nan", "the server sent a message that is not valid JSON: invalid character 'N'"},
		{"deep", "the server sent a message that is not valid JSON: invalid character '[' exceeded max depth"},
	} {
		_, err := callTool(t, s, "srv.respond", `{"mode": "`+c.mode+`"}`)
		checkDown(t, c.mode, err, c.want)
		checkDown(t, c.mode+": Err", s.Err(), "")
		_, err = callTool(t, s, "srv.echo", `{"text": "x"}`)
		checkDown(t, c.mode+": a call while down", err, "")
		d.gate <- struct{}{}
		waitUp(t, s)
		checkEcho(t, s)
	}

	before := d.connections()
	_, err := callTool(t, s, "srv.respond", `{"mode": "badshape"}`)
	var down *mcpclient.DownError
	if err == nil || errors.As(err, &down) || !strings.HasPrefix(err.Error(), "respond: ") {
		t.Fatalf("badshape: err = %v, want the call's own error", err)
	}
	if err := s.Err(); err != nil {
		t.Fatalf("after a bad result: %v", err)
	}
	checkEcho(t, s)
	if d.connections() != before {
		t.Fatal("reconnected after a bad result")
	}
}

// TestServerHTTPRestart: an HTTP server that forgets its sessions (as one
// restarted does) ends the client's session; the client connects again.
func TestServerHTTPRestart(t *testing.T) {
	var handler atomic.Pointer[http.Handler]
	restart := func() {
		server := testtools.NewServer(3)
		var h http.Handler = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil)
		handler.Store(&h)
	}
	restart()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		(*handler.Load()).ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	d := newDialer("")
	d.url = ts.URL
	s := d.dial(t)
	checkEcho(t, s)

	restart()
	_, err := callTool(t, s, "srv.echo", `{"text": "x"}`)
	checkDown(t, "after the restart", err, "")
	d.gate <- struct{}{}
	waitUp(t, s)
	checkEcho(t, s)
}

// TestServerDialFails: a server that cannot be reached is an error of Dial,
// and leaves nothing running.
func TestServerDialFails(t *testing.T) {
	_, err := mcpclient.Dial(t.Context(), func() mcp.Transport {
		return &mcp.CommandTransport{Command: exec.Command("/no/such/server")}
	}, "srv", nil)
	if err == nil || !strings.Contains(err.Error(), "server srv") {
		t.Fatalf("err = %v", err)
	}
	_, err = mcpclient.Dial(t.Context(), newDialer("1").transport, "srv", &mcpclient.Options{EarlyReads: []string{"rm_rf"}})
	if err == nil || !strings.Contains(err.Error(), "rm_rf") {
		t.Fatalf("err = %v", err)
	}
}

// TestServerThroughPython: a program sees a down server's error as a
// RuntimeError it can catch.
func TestServerThroughPython(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the Guest")
	}
	d := newDialer("1")
	s := d.dial(t)
	r, err := spine.New(t.Context(), s.Tools(), &spine.Options{PoolSize: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	if err := d.cmd(0).Process.Kill(); err != nil {
		t.Fatal(err)
	}
	for s.Err() == nil {
		time.Sleep(5 * time.Millisecond)
	}
	out, err := r.Run(t.Context(), spine.Request{Source: `
try:
    srv.echo(text="x")
except RuntimeError as err:
    result = str(err)
`})
	if err != nil {
		t.Fatal(err)
	}
	var text string
	if json.Unmarshal(out.Value, &text) != nil || !strings.HasPrefix(text, "mcp server srv is down: ") {
		t.Fatalf("value %s", out.Value)
	}
}
