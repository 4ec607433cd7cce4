package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spine-run/spine"
	"github.com/spine-run/spine/door"
	"github.com/spine-run/spine/internal/spinetest"
	"github.com/spine-run/spine/mcpserver"
	"github.com/spine-run/spine/service"
)

// serveInProcess serves handler with serveHTTP on a loopback port until the
// test ends; it returns the address.
func serveInProcess(t *testing.T, handler http.Handler, limits httpLimits, ln net.Listener) string {
	t.Helper()
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan int, 1)
	var stderr bytes.Buffer
	go func() {
		served <- serveHTTP(ctx, stop, ln, handler, serving{limits: limits, grace: time.Minute, log: serverLog{name: "test", w: &stderr}}, nil)
	}()
	t.Cleanup(func() {
		stop()
		if code := <-served; code != exitOK {
			t.Errorf("serveHTTP: exit %d\n%s", code, stderr.String())
		}
	})
	return ln.Addr().String()
}

// demoRunner is a Runner with the demo tools, closed when the test ends.
func demoRunner(t *testing.T, extra spine.Manifest) (*spine.Runner, spine.Manifest) {
	t.Helper()
	manifest := demoTools()
	for name, spec := range extra {
		manifest[name] = spec
	}
	return spinetest.NewRunner(t, manifest, nil), manifest
}

// rawRequest writes request on a new connection to addr and returns the
// connection and a reader of it.
func rawRequest(t *testing.T, addr, request string) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := io.WriteString(conn, request); err != nil {
		t.Fatal(err)
	}
	return conn, bufio.NewReader(conn)
}

// TestHTTPLimits serves the HTTP API with short limits: the limits end the
// clients that are slow, never a run that takes long.
func TestHTTPLimits(t *testing.T) {
	runner, _ := demoRunner(t, nil)
	// A second to read a request: a body that stops short is waited for
	// that long, and headers sent in one write are read well within it,
	// however busy the machine.
	short := httpLimits{readTimeout: time.Second, idleTimeout: time.Hour}
	addr := serveInProcess(t, service.New(runner, &service.Options{MaxTimeout: time.Hour}), short, nil)

	t.Run("headers", func(t *testing.T) {
		// Headers that never end: the connection is closed, unanswered.
		_, r := rawRequest(t, addr, "GET /healthz HTTP/1.1\r\nHost: localhost\r\n")
		if rest, err := io.ReadAll(r); err != nil || len(rest) != 0 {
			t.Fatalf("read %q, %v", rest, err)
		}
	})

	t.Run("body", func(t *testing.T) {
		// A body shorter than its Content-Length: 408, read_timeout.
		_, r := rawRequest(t, addr, "POST /v1/run HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"source\": ")
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatal(err)
		}
		var out service.Response
		json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestTimeout || out.Error == nil || out.Error.Kind != "read_timeout" {
			t.Fatalf("status %d, %+v", resp.StatusCode, out.Error)
		}
	})

	t.Run("idle", func(t *testing.T) {
		// A keep-alive connection left idle is closed. (net/http starts
		// the header timeout only once a request's first bytes arrive.)
		idle := httpLimits{readTimeout: time.Hour, idleTimeout: 100 * time.Millisecond}
		addr := serveInProcess(t, service.New(runner, nil), idle, nil)
		_, r := rawRequest(t, addr, "GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Close {
			t.Fatalf("status %d, close %v", resp.StatusCode, resp.Close)
		}
		if rest, err := io.ReadAll(r); err != nil || len(rest) != 0 {
			t.Fatalf("after the answer: read %q, %v", rest, err)
		}
	})

	t.Run("long runs", func(t *testing.T) {
		// Runs longer than the read timeout, whose bodies came in time,
		// are not cut by it (nor taken for clients that went away). A
		// server of its own, whose read timeout no wait for a body sent
		// with its headers reaches, however busy the machine; the runs
		// take three times as long.
		limits := httpLimits{readTimeout: 500 * time.Millisecond, idleTimeout: time.Hour}
		url := "http://" + serveInProcess(t, service.New(runner, &service.Options{MaxTimeout: time.Hour}), limits, nil)
		status, a, err := postRun(t, url, `{"source": "import time\ntime.sleep(1.5)\n'slept'"}`)
		if err != nil || status != 200 || string(a.Value) != `"slept"` {
			t.Fatalf("/v1/run: %v, status %d, %+v", err, status, a)
		}
		resp, err := http.Post(url+"/v1/run/stream", "text/x-python", strings.NewReader("import time\ntime.sleep(1.5)\n'streamed'\n"))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(&a); err != nil || resp.StatusCode != 200 || string(a.Value) != `"streamed"` {
			t.Fatalf("/v1/run/stream: %v, status %d, %+v", err, resp.StatusCode, a)
		}
	})
}

// countingListener records how many of its connections were open at most,
// and tells accepted (when set) of each connection it accepts.
type countingListener struct {
	net.Listener
	accepted  chan struct{}
	mu        sync.Mutex
	open, max int
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	l.open++
	l.max = max(l.max, l.open)
	l.mu.Unlock()
	if l.accepted != nil {
		l.accepted <- struct{}{}
	}
	return &countedConn{Conn: c, l: l}, nil
}

func (l *countingListener) most() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.max
}

type countedConn struct {
	net.Conn
	l    *countingListener
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		c.l.open--
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}

// TestMaxConns: with --max-conns 1, a second client waits until the first
// one's connection closes, then is served.
func TestMaxConns(t *testing.T) {
	runner, _ := demoRunner(t, nil)
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	counted := &countingListener{Listener: inner}
	waiting := make(chan struct{}, 16)
	limits := httpLimits{maxConns: 1, acceptWait: func() {
		select {
		case waiting <- struct{}{}:
		default:
		}
	}}
	addr := serveInProcess(t, service.New(runner, nil), limits, counted)

	// The first client keeps its connection open after an answer.
	first, r := rawRequest(t, addr, "GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
	resp, err := http.ReadResponse(r, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("first client: %v %v", resp, err)
	}
	io.Copy(io.Discard, resp.Body)
	<-waiting // the server waits for a free connection before it accepts again

	// The second client connects (in the kernel's backlog) and asks.
	second, r2 := rawRequest(t, addr, "POST /v1/run HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 16\r\n\r\n{\"source\": \"42\"}")
	defer second.Close()
	first.Close()
	resp, err = http.ReadResponse(r2, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !bytes.Contains(body, []byte(`"value":42`)) {
		t.Fatalf("second client: %d %s", resp.StatusCode, body)
	}
	if n := counted.most(); n != 1 {
		t.Fatalf("%d connections were open at once, want 1", n)
	}
}

// TestTokenRequired: without a token, spine serve and spine mcp --http
// refuse to listen on anything but loopback; a bad token file is a usage
// error. All before any MCP server or Guest starts.
func TestTokenRequired(t *testing.T) {
	t.Setenv("SPINE_TOKEN", "")
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	spaced := filepath.Join(dir, "spaced")
	os.WriteFile(empty, []byte(" \n"), 0o600)
	os.WriteFile(spaced, []byte("two words\n"), 0o600)
	for _, tc := range []struct {
		args []string
		out  string
	}{
		{[]string{"serve", "--listen", "0.0.0.0:0"}, "--listen 0.0.0.0:0 is not a loopback address"},
		{[]string{"serve", "--listen", ":8080"}, "is not a loopback address"},
		{[]string{"serve", "--listen", "[::]:0"}, "is not a loopback address"},
		{[]string{"serve", "--listen", "example.com:80"}, "is not a loopback address"},
		{[]string{"mcp", "--http", "0.0.0.0:0"}, "--http 0.0.0.0:0 is not a loopback address"},
		{[]string{"serve", "--token-file", empty}, "is empty"},
		{[]string{"mcp", "--http", "127.0.0.1:0", "--token-file", empty}, "is empty"},
		{[]string{"serve", "--token-file", spaced}, "one word"},
		{[]string{"serve", "--token-file", filepath.Join(dir, "missing")}, "no such file"},
		{[]string{"serve", "--max-conns", "0"}, "must be positive"},
		{[]string{"mcp", "--http", "127.0.0.1:0", "--read-timeout", "0s"}, "must be positive"},
		{[]string{"serve", "--stream-idle", "0s"}, "--stream-idle must be positive"},
		{[]string{"serve", "--paused", "0"}, "--tool-wait and --paused must be positive"},
		{[]string{"serve", "--replica", "r1.eu"}, "--replica: a replica name has only letters, digits and '-'"},
		{[]string{"mcp", "--slots", "-1"}, "--slots and --memory not negative"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(tc.args, &stdout, &stderr)
		if code != exitUsage || !strings.Contains(stderr.String(), tc.out) {
			t.Errorf("%v: exit %d, stderr %q", tc.args, code, stderr.String())
		}
	}
}

// TestListenBound: without a token, the address a server bound must be
// loopback, whatever its name said; with one, any address will do.
func TestListenBound(t *testing.T) {
	for _, tc := range []struct {
		addr, token string
		code        int
	}{
		{"127.0.0.1:0", "", exitOK},
		{"localhost:0", "", exitOK},
		{"0.0.0.0:0", "", exitUsage},
		{"0.0.0.0:0", "tok", exitOK},
		{"127.0.0.1:-1", "", exitFailure},
	} {
		var stderr bytes.Buffer
		ln, code := listen(serverLog{name: "spine serve", w: &stderr}, "--listen", tc.addr, tc.token != "")
		if ln != nil {
			if tcp := ln.Addr().(*net.TCPAddr); tc.token == "" && !tcp.IP.IsLoopback() {
				t.Errorf("%s: bound %v without a token", tc.addr, tcp)
			}
			ln.Close()
		}
		if code != tc.code || (ln != nil) != (code == exitOK) {
			t.Errorf("%s, token %q: exit %d, listener %v, stderr %q", tc.addr, tc.token, code, ln != nil, stderr.String())
		}
		if code == exitUsage && !strings.Contains(stderr.String(), "--listen "+tc.addr+" listens on ") ||
			code == exitUsage && !strings.Contains(stderr.String(), "which is not a loopback address: set a token") {
			t.Errorf("%s: stderr %q", tc.addr, stderr.String())
		}
	}
}

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:8080": true, "127.0.0.2:1": true, "[::1]:8080": true, "localhost:0": true, "LOCALHOST:1": true,
		"0.0.0.0:8080": false, ":8080": false, "[::]:80": false, "10.0.0.1:80": false, "example.com:80": false, "127.0.0.1": false,
	} {
		if got := isLoopback(addr); got != want {
			t.Errorf("isLoopback(%q) = %v", addr, got)
		}
	}
}

// bearer adds a token to every request of an HTTP client.
type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// TestMCPHTTPTokenAndSlots serves MCP over HTTP in process with a token and
// one slot: a client needs the token; a call past the slot is told to retry
// while another runs.
func TestMCPHTTPTokenAndSlots(t *testing.T) {
	gate := spinetest.NewGate()
	runner, _ := demoRunner(t, spine.Manifest{"gate": gate.Tool()})
	server := mcpserver.NewServer(runner, &mcpserver.Options{Slots: 1})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var stderr bytes.Buffer
	served := make(chan int, 1)
	go func() {
		served <- serveMCP(ctx, stop, ln, server, mcpHTTP{runner: runner, tenants: door.NewTenants(nil, []door.Tenant{{Name: "default", Token: "s3cret"}}, 0), log: slog.New(slog.DiscardHandler)}, serving{grace: time.Minute, log: serverLog{name: "spine mcp", w: &stderr}})
	}()
	endpoint := "http://" + ln.Addr().String() + "/mcp"

	resp, err := http.Post(endpoint, "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
		t.Fatalf("without the token: %d, WWW-Authenticate %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "spine-test", Version: "v0"}, nil)
	if cs, err := client.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: &http.Client{Transport: bearer{"wrong"}}, MaxRetries: -1}, nil); err == nil {
		cs.Close()
		t.Fatal("a client with the wrong token connected")
	}

	cs, err := client.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: &http.Client{Transport: bearer{"s3cret"}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	callPython := func(source string) *mcp.CallToolResult {
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "run_python", Arguments: map[string]any{"source": source}})
		if err != nil {
			t.Error(err)
			return &mcp.CallToolResult{IsError: true}
		}
		return res
	}
	answer := make(chan *mcp.CallToolResult, 1)
	go func() { answer <- callPython("gate()") }()
	<-gate.Entered
	if res := callPython("1"); !res.IsError || !strings.HasPrefix(spinetest.Text(res), "busy, retry") {
		t.Fatalf("a call past the slot: IsError %v, %q", res.IsError, spinetest.Text(res))
	}
	gate.Open()
	if res := <-answer; res.IsError || spinetest.Text(res) != `{"value":"opened","stdout":""}` {
		t.Fatalf("the call in the slot: %q", spinetest.Text(res))
	}
	if res := callPython("6 * 7"); res.IsError || spinetest.Text(res) != `{"value":42,"stdout":""}` {
		t.Fatalf("after it: %q", spinetest.Text(res))
	}
	cs.Close()
	stop()
	if code := <-served; code != exitOK {
		t.Fatalf("serveMCP: exit %d\n%s", code, stderr.String())
	}
}

// TestTokenProcess runs spine serve with --token-file and spine mcp --http
// with SPINE_TOKEN as processes: /healthz is open, everything else needs the
// token.
func TestTokenProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the spine command")
	}
	bin := buildSpine(t)
	const token = "process-token"
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	t.Run("serve", func(t *testing.T) {
		p, addr := start(t, bin, "serve", "--listen", "127.0.0.1:0", "--demo-tools", "--token-file", file)
		url := "http://" + addr
		send := func(method, path, auth, body string) (int, http.Header, string) {
			t.Helper()
			req, _ := http.NewRequest(method, url+path, strings.NewReader(body))
			if auth != "" {
				req.Header.Set("Authorization", auth)
			}
			if method == "POST" {
				req.Header.Set("Content-Type", "application/json")
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			raw, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, resp.Header, string(raw)
		}
		run := `{"source": "lookup(key='book') * 2"}`
		for _, auth := range []string{"", "Bearer wrong"} {
			for _, path := range []string{"/v1/run", "/metrics"} {
				method := map[string]string{"/v1/run": "POST", "/metrics": "GET"}[path]
				status, header, body := send(method, path, auth, run)
				if status != http.StatusUnauthorized || !strings.HasPrefix(header.Get("WWW-Authenticate"), "Bearer") {
					t.Errorf("%s %s with %q: %d %q %s", method, path, auth, status, header.Get("WWW-Authenticate"), body)
				}
			}
		}
		if status, _, body := send("POST", "/v1/run", "Bearer "+token, run); status != 200 || !strings.Contains(body, `"value":42`) {
			t.Errorf("with the token: %d %s", status, body)
		}
		if status, _, body := send("GET", "/metrics", "Bearer "+token, ""); status != 200 || !strings.Contains(body, "spine_runs_total") {
			t.Errorf("/metrics with the token: %d", status)
		}
		if status, _, body := send("GET", "/healthz", "", ""); status != 200 || !strings.Contains(body, `"status":"ok"`) {
			t.Errorf("/healthz: %d %s", status, body)
		}
		p.cmd.Process.Signal(syscall.SIGTERM)
		if code := p.wait(t); code != 0 {
			t.Errorf("exit code %d", code)
		}
	})

	t.Run("mcp", func(t *testing.T) {
		p, addr := startEnv(t, []string{"SPINE_TOKEN=" + token}, bin, "mcp", "--http", "127.0.0.1:0", "--demo-tools")
		endpoint := "http://" + addr + "/mcp"
		client := mcp.NewClient(&mcp.Implementation{Name: "spine-test", Version: "v0"}, nil)
		if cs, err := client.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: endpoint, MaxRetries: -1}, nil); err == nil {
			cs.Close()
			t.Fatal("a client without the token connected")
		}
		cs, err := client.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: &http.Client{Transport: bearer{token}}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		checkMCP(t, cs)
		cs.Close()
		p.cmd.Process.Signal(syscall.SIGTERM)
		if code := p.wait(t); code != 0 {
			t.Errorf("exit code %d", code)
		}
	})
}

// TestClientToolsProcess: spine serve as a process pauses a run at a tool
// its caller answers, and continues it with the result; a client tool
// named as one of the server's is refused, naming it.
func TestClientToolsProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the spine command")
	}
	bin := buildSpine(t)
	p, addr := start(t, bin, "serve", "--listen", "127.0.0.1:0", "--demo-tools", "--tool-wait", "1m", "--paused", "4")
	post := func(path, body string) (int, map[string]any) {
		t.Helper()
		resp, err := http.Post("http://"+addr+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, out
	}
	tool := `{"name": "get_weather", "description": "The weather.", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}`
	status, out := post("/v1/run", `{"source": "get_weather('Paris')['temp'] * lookup(key='pen')", "tools": [`+tool+`]}`)
	pending, _ := out["pending"].([]any)
	if status != 200 || out["status"] != "tool_calls" || len(pending) != 1 {
		t.Fatalf("status %d %v", status, out)
	}
	call := pending[0].(map[string]any)
	if call["name"] != "get_weather" || call["arguments"].(map[string]any)["city"] != "Paris" {
		t.Fatalf("pending %v", call)
	}
	status, out = post("/v1/runs/"+out["run_id"].(string)+"/tool_results", `{"results": [{"id": "`+call["id"].(string)+`", "value": {"temp": 20}}]}`)
	if status != 200 || out["status"] != "done" || out["value"] != 40.0 {
		t.Fatalf("status %d %v", status, out)
	}
	status, out = post("/v1/run", `{"source": "1", "tools": [{"name": "lookup"}]}`)
	if msg, _ := out["error"].(map[string]any)["message"].(string); status != 400 || !strings.Contains(msg, `"lookup"`) {
		t.Errorf("a client tool named as a server tool: %d %v", status, out)
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.wait(t); code != 0 {
		t.Errorf("exit code %d", code)
	}
}

// TestMCPLogsClipped: the servers' log lines (the SDK's, with --verbose, in
// both formats) go through door.ClipLogs, as spine mcp sets it up.
func TestMCPLogsClipped(t *testing.T) {
	for _, format := range []string{"text", "json"} {
		var b bytes.Buffer
		logger, err := (&logFlags{format: format, verbose: true}).logger(&b)
		if err != nil {
			t.Fatal(err)
		}
		logger.Error(fmt.Sprintf("calling tools/call: %v", errors.New(strings.Repeat("x", 1<<20))))
		if b.Len() > 1024 || !strings.Contains(b.String(), "bytes)") {
			t.Fatalf("%s: %d bytes logged: %.300s", format, b.Len(), b.String())
		}
	}
	if _, err := (&logFlags{format: "xml"}).logger(io.Discard); err == nil {
		t.Fatal("--log-format xml accepted")
	}
}

// serveHTTP serves handler on ln until ctx ends (a signal), then shuts down:
// drain (when set) starts the drain (/readyz 503, new requests refused);
// the listener stays open for the drain delay; then it stops accepting,
// waits for the requests in flight until grace after the drain began, and
// closes what is left. stop restores the signals' default behaviour, so
// that a second Ctrl-C ends the process at once. onShutdown functions run
// (each in its own goroutine) when the listener closes.
func serveHTTP(ctx context.Context, stop func(), ln net.Listener, handler http.Handler, s serving, drain func(), onShutdown ...func()) int {
	srv, served := startHTTP(ln, handler, s, onShutdown...)
	select {
	case err := <-served:
		s.log.error(err.Error())
		return exitFailure
	case <-ctx.Done():
	}
	stop()
	if drain != nil {
		drain()
	}
	delayed := s.drainDelay(ctx)
	s.log.info(fmt.Sprintf("shutting down; waiting up to %v for requests in flight", s.grace), "grace", s.grace.String())
	shutdownCtx, cancel := context.WithTimeout(context.Background(), s.grace)
	defer cancel()
	<-delayed
	if err := srv.Shutdown(shutdownCtx); err != nil {
		s.log.error(fmt.Sprintf("requests still in flight after %v; stopping them", s.grace))
		srv.Close()
		return exitFailure
	}
	s.log.info("stopped")
	return exitOK
}
