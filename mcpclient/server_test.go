package mcpclient_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spine-run/spine"
	"github.com/spine-run/spine/internal/spinetest"
	"github.com/spine-run/spine/mcpclient"
)

// dialer gives a Server its transports: each a new process of the test
// server (mode is spinetest.MCPServerEnv's value), or a URL. Every
// connection after the first waits for a token on gate, so that a test sees
// the server down for as long as it likes. The Server's log tells events
// when it loses its session and when it has a new one.
type dialer struct {
	mode   string
	url    string
	gate   chan struct{}
	refuse chan struct{} // a token makes the next connection fail
	events chan string
	opts   mcpclient.Options

	mu   sync.Mutex
	cmds []*exec.Cmd
	n    int
}

func newDialer(mode string) *dialer {
	return &dialer{mode: mode, gate: make(chan struct{}), refuse: make(chan struct{}), events: make(chan string, 1024)}
}

func (d *dialer) transport() mcp.Transport {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.n++
	var t mcp.Transport
	if d.url != "" {
		t = &mcp.StreamableClientTransport{Endpoint: d.url, DisableStandaloneSSE: true}
	} else {
		cmd := spinetest.MCPCommand(d.mode, greeting)
		d.cmds = append(d.cmds, cmd)
		t = &mcp.CommandTransport{Command: cmd, TerminateDuration: time.Second}
	}
	if d.n == 1 {
		return t
	}
	return gated{t, d.gate, d.refuse}
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
	opts := d.opts
	opts.Logger = slog.New(eventHandler{d.events})
	s, err := mcpclient.Dial(t.Context(), d.transport, "srv", &opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Close()
		d.mu.Lock()
		cmds := slices.Clone(d.cmds)
		d.mu.Unlock()
		// The SDK may return from closing a session before the goroutine
		// that waits for its process has done so (when the process exits
		// just as it gives up waiting and signals it): ask the process,
		// whose state is safe to read while it is waited for, and wait. A
		// process never waited for keeps the test here until -timeout.
		for i, cmd := range cmds {
			if cmd.Process == nil {
				continue // never started
			}
			spinetest.WaitFor(t, fmt.Sprintf("process %d (pid %d) to be waited for", i, cmd.Process.Pid), func() bool {
				return errors.Is(cmd.Process.Signal(syscall.Signal(0)), os.ErrProcessDone)
			})
		}
	})
	return s
}

// gated connects once it gets a token on gate, or fails when it gets one
// on refuse or ctx ends first.
type gated struct {
	mcp.Transport
	gate, refuse chan struct{}
}

func (g gated) Connect(ctx context.Context) (mcp.Connection, error) {
	select {
	case <-g.gate:
		return g.Transport.Connect(ctx)
	case <-g.refuse:
		return nil, errors.New("refused by the test")
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// callWhileDown calls echo on s, which is reconnecting: the call waits for
// the reconnection, which the gate lets through, and is answered.
func callWhileDown(t *testing.T, d *dialer, s *mcpclient.Server, what string) {
	t.Helper()
	answer := make(chan error, 1)
	go func() {
		v, err := callTool(t, s, "srv.echo", `{"text": "x"}`)
		if err == nil && v != "x" {
			err = fmt.Errorf("echo answered %v", v)
		}
		answer <- err
	}()
	d.gate <- struct{}{}
	if err := <-answer; err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	d.waitUp(t)
}

func callTool(t *testing.T, s *mcpclient.Server, name, args string) (any, error) {
	t.Helper()
	return call(t, s.Tools(), name, args)
}

// eventHandler sends the message of every log record to events, dropping
// it when events is full.
type eventHandler struct{ events chan<- string }

func (h eventHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h eventHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h eventHandler) WithGroup(string) slog.Handler            { return h }

func (h eventHandler) Handle(_ context.Context, r slog.Record) error {
	select {
	case h.events <- r.Message:
	default:
	}
	return nil
}

// waitEvent waits for the Server's log to tell event; the events before it
// are dropped.
func (d *dialer) waitEvent(t *testing.T, event string) {
	t.Helper()
	for e := range d.events {
		if e == event {
			return
		}
	}
}

// waitUp waits until the Server has a new session: it logs that after
// making the session current.
func (d *dialer) waitUp(t *testing.T) {
	t.Helper()
	d.waitEvent(t, "mcp server reconnected")
}

// waitDown waits until the Server has lost its session: it logs that after
// recording the cause Err and calls report.
func (d *dialer) waitDown(t *testing.T) {
	t.Helper()
	d.waitEvent(t, "mcp server down")
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
	callWhileDown(t, d, s, "a call while reconnecting")
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
	d.waitDown(t)
	checkDown(t, "Err", s.Err(), "the server process ended: signal: killed")
	// A reconnection that fails: calls fail at once until one succeeds.
	d.refuse <- struct{}{}
	d.waitEvent(t, "mcp server still down")
	_, err := callTool(t, s, "srv.echo", `{"text": "x"}`)
	checkDown(t, "a call while down", err, "refused by the test")
	d.gate <- struct{}{}
	d.waitUp(t)
	checkEcho(t, s)

	s.Close()
	if _, err := callTool(t, s, "srv.echo", `{"text": "x"}`); !errors.Is(err, mcpclient.ErrClosed) {
		t.Fatalf("a call after Close: %v", err)
	}
	s.Close() // twice is fine
	// Nothing of the Server runs any more. (The SDK's goroutines end after
	// Close returns, and announce it nowhere.)
	spinetest.WaitFor(t, "the Server's goroutines to end", func() bool { return runtime.NumGoroutine() <= goroutines })
}

// TestServerBadResponse: a server that answers with what the client cannot
// decode loses its session; the call fails with the cause, the server is
// reconnected, and later calls work. A response that breaks only its own call
// leaves the session as it is.
func TestServerBadResponse(t *testing.T) {
	d := newDialer("misbehave")
	s := d.dial(t)
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

	// (A fourth break by respond would be refused: see
	// TestServerRefusesACallerThatBreaksIt.)
	for _, c := range []struct{ mode, want string }{
		{"garbage", "the server sent a message that is not valid JSON: invalid character 'h' in literal true"},
		{"nan", "the server sent a message that is not valid JSON: invalid character 'N'"},
		{"deep", "the server sent a message that is not valid JSON: invalid character '[' exceeded max depth"},
	} {
		_, err := callTool(t, s, "srv.respond", `{"mode": "`+c.mode+`"}`)
		checkDown(t, c.mode, err, c.want)
		checkDown(t, c.mode+": Err", s.Err(), c.want)
		callWhileDown(t, d, s, c.mode+": a call while reconnecting")
		checkEcho(t, s)
	}
}

// TestServerHTTPRestart: an HTTP server that forgets its sessions (as one
// restarted does) ends the client's session; the client connects again.
func TestServerHTTPRestart(t *testing.T) {
	var handler atomic.Pointer[http.Handler]
	restart := func() {
		h := spinetest.MCPHandler(spinetest.NewMCPServer(3))
		handler.Store(&h)
	}
	restart()
	ts := spinetest.ServeHTTP(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		(*handler.Load()).ServeHTTP(w, r)
	}))
	d := newDialer("")
	d.url = ts.URL
	s := d.dial(t)
	checkEcho(t, s)

	restart()
	_, err := callTool(t, s, "srv.echo", `{"text": "x"}`)
	checkDown(t, "after the restart", err, "")
	d.gate <- struct{}{}
	d.waitUp(t)
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
	r := spinetest.NewRunner(t, s.Tools(), &spine.Options{PoolSize: -1})
	if err := d.cmd(0).Process.Kill(); err != nil {
		t.Fatal(err)
	}
	d.waitDown(t)
	d.refuse <- struct{}{} // down for good: calls fail at once
	d.waitEvent(t, "mcp server still down")
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

// TestServerStartsDown: with StartDown, a server that cannot be started at
// first is no error of Dial: the Server is down, its calls fail at once
// naming it, and it connects in the background once it can; its tools are
// stand-ins for Options.Tools that then call the server's. A tool list
// naming a tool the server lacks is then Err's error.
func TestServerStartsDown(t *testing.T) {
	for _, tools := range [][]string{{"echo", "add"}, {"echo", "nope"}} {
		gate := filepath.Join(t.TempDir(), "gate")
		if err := os.WriteFile(gate, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		events := make(chan string, 1024)
		s, err := mcpclient.Dial(t.Context(), func() mcp.Transport {
			return &mcp.CommandTransport{Command: spinetest.MCPCommand("1", spinetest.MCPGateEnv+"="+gate)}
		}, "srv", &mcpclient.Options{StartDown: true, Tools: tools, Logger: slog.New(eventHandler{events})})
		if err != nil {
			t.Fatal(err)
		}
		checkDown(t, "Err at start", s.Err(), "connecting: ")
		if got := slices.Sorted(maps.Keys(s.Tools())); !slices.Equal(got, slices.Sorted(slices.Values([]string{"srv." + tools[1], "srv.echo"}))) {
			t.Fatalf("tools %v", got)
		}
		_, err = callTool(t, s, "srv.echo", `{"text": "x"}`)
		checkDown(t, "a call while down", err, "connecting: ")

		os.Remove(gate)
		for e := range events {
			if e == "mcp server reconnected" {
				break
			}
		}
		if tools[1] == "nope" {
			if err := s.Err(); err == nil || !strings.Contains(err.Error(), "the tool lists name tools it does not have: nope") {
				t.Fatalf("Err with a tool list naming a tool the server lacks: %v", err)
			}
			if _, err := callTool(t, s, "srv.echo", `{"text": "x"}`); err == nil || !strings.Contains(err.Error(), "nope") {
				t.Fatalf("a call with a bad tool list: %v", err)
			}
		} else {
			checkEcho(t, s)
			if v, err := callTool(t, s, "srv.add", `{"a": 1, "b": 2}`); err != nil || !jsonIs(v, `{"sum":3}`) {
				t.Fatalf("add: %v, %v", v, err)
			}
			if err := s.Err(); err != nil {
				t.Fatalf("Err once up: %v", err)
			}
		}
		s.Close()
	}
}

// jsonIs reports whether v encodes to want.
func jsonIs(v any, want string) bool {
	b, err := json.Marshal(v)
	return err == nil && string(b) == want
}
