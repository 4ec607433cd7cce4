package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/spine-run/spine/internal/spinetest"
)

// buildSpine builds the spine command into a folder of t's, for tests that
// run it as a real process.
func buildSpine(t *testing.T) string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build spine with")
	}
	bin := filepath.Join(t.TempDir(), "spine")
	build := exec.Command(gobin, "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// process is a spine command running as a subprocess.
type process struct {
	cmd    *exec.Cmd
	lines  chan string // its standard error, line by line
	exited chan error
	before []string // the lines before "listening on"
}

// start runs bin with args and waits for its "listening on http://ADDR" line;
// it returns the process and ADDR.
func start(t *testing.T, bin string, args ...string) (*process, string) {
	t.Helper()
	return startEnv(t, nil, bin, args...)
}

// startEnv is start with variables added to the environment. A server
// drains without a drain delay unless args set one: TestDrainDelayProcess
// tests the delay, the other tests need not wait for it.
func startEnv(t *testing.T, env []string, bin string, args ...string) (*process, string) {
	t.Helper()
	if len(args) > 0 && (args[0] == "serve" || args[0] == "mcp") && !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--drain-delay") }) {
		args = append(args[:len(args):len(args)], "--drain-delay=0")
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "SPINE_CONFIG=", "SPINE_TOKEN=") // no configured servers, no token
	cmd.Env = append(cmd.Env, env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &process{cmd: cmd, lines: make(chan string, 1000), exited: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
		p.exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
		}
	})
	for line := range p.lines {
		if _, rest, ok := strings.Cut(line, "listening on http://"); ok {
			return p, strings.Fields(rest)[0]
		}
		p.before = append(p.before, line)
	}
	t.Fatalf("%s exited before listening: %v", bin, <-p.exited)
	return nil, ""
}

// waitLine waits for a line of the process's standard error containing want.
func (p *process) waitLine(t *testing.T, want string) {
	t.Helper()
	for line := range p.lines {
		if strings.Contains(line, want) {
			return
		}
	}
	t.Fatalf("the process ended without printing %q", want)
}

// wait waits for the process to exit and returns its exit code.
func (p *process) wait(t *testing.T) int {
	t.Helper()
	for range p.lines { // drain
	}
	err := <-p.exited
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatal(err)
	}
	return p.cmd.ProcessState.ExitCode()
}

type serveAnswer struct {
	Value  json.RawMessage
	Stdout string
	Error  *struct{ Kind, Type, Message string }
}

func postRun(t *testing.T, url string, body string) (int, serveAnswer, error) {
	return post(t, url+"/v1/run", body)
}

func post(t *testing.T, url string, body string) (int, serveAnswer, error) {
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		return 0, serveAnswer{}, err
	}
	defer resp.Body.Close()
	var a serveAnswer
	raw, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(raw, &a); err != nil {
		t.Errorf("answer %q: %v", raw, err)
	}
	return resp.StatusCode, a, nil
}

// createSession makes a session with POST /v1/sessions and returns its id.
func createSession(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Post(url+"/v1/sessions", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var info struct{ ID string }
	if err := json.NewDecoder(resp.Body).Decode(&info); err != nil || resp.StatusCode != http.StatusCreated || info.ID == "" {
		t.Fatalf("POST /v1/sessions: status %d, %+v, %v", resp.StatusCode, info, err)
	}
	return info.ID
}

// TestServeProcess runs spine serve as a process: a run with the demo tools,
// a session (left open), then SIGTERM while a run is in flight: the run
// completes, the process exits 0.
func TestServeProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the spine command")
	}
	bin := buildSpine(t)
	p, addr := start(t, bin, "serve", "--listen", "127.0.0.1:0", "--slots", "2", "--demo-tools",
		"--session-memory", "128", "--session-ttl", "10m", "--live-sessions", "1", "--session-dir", t.TempDir())
	url := "http://" + addr

	status, a, err := postRun(t, url, `{"source": "result = lookup(key='book') * inputs['quantity'] + len(prices.list())", "inputs": {"quantity": 3}}`)
	if err != nil || status != 200 || string(a.Value) != "65" {
		t.Fatalf("run: %v, status %d, %+v", err, status, a)
	}

	// run_python for agents: a model's arguments in, the text it reads out.
	resp, err := http.Post(url+"/v1/tool/call", "application/json", strings.NewReader(`{"source": "print('pricing')\nlookup(key='book') * 3"}`))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var tool struct {
		Text    string `json:"text"`
		IsError bool   `json:"is_error"`
	}
	if err := json.Unmarshal(raw, &tool); err != nil || resp.StatusCode != 200 || tool.IsError || tool.Text != `{"value":63,"stdout":"pricing\n"}` {
		t.Errorf("POST /v1/tool/call: %d %s", resp.StatusCode, raw)
	}

	// Two sessions, with one live Guest: the first hibernates to
	// --session-dir when the second starts, and wakes for its next run.
	first, second := createSession(t, url), createSession(t, url)
	for _, step := range []struct{ id, source, want string }{
		{first, "x = lookup(key='book')", "null"},
		{second, "x = 1", "null"},
		{first, "x * 2", "42"},
		{second, "x", "1"},
	} {
		status, a, err := post(t, url+"/v1/sessions/"+step.id+"/run", `{"source": "`+step.source+`"}`)
		if err != nil || status != 200 || string(a.Value) != step.want {
			t.Fatalf("%s in %s: %v, status %d, %+v", step.source, step.id, err, status, a)
		}
	}
	if got := spinetest.Metrics(t, url, "")["spine_sessions"]; got != 2 {
		t.Errorf("spine_sessions %v", got)
	}

	type result struct {
		status int
		answer serveAnswer
		err    error
	}
	results := make(chan result, 1)
	go func() {
		status, a, err := postRun(t, url, `{"source": "import time\nprint('started')\ntime.sleep(2)\nresult = 'finished'"}`)
		results <- result{status, a, err}
	}()
	spinetest.WaitFor(t, "the run to be in flight", func() bool { return spinetest.Metrics(t, url, "")["spine_runs_in_flight"] == 1 })
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	p.waitLine(t, "shutting down")
	var r result
	select {
	case r = <-results:
		t.Log("the run ended before the shutdown began: the in-flight path was not exercised")
	default:
		r = <-results
	}
	if r.err != nil || r.status != 200 || string(r.answer.Value) != `"finished"` || r.answer.Stdout != "started\n" {
		t.Fatalf("run in flight: %v, status %d, %+v", r.err, r.status, r.answer)
	}
	if code := p.wait(t); code != 0 {
		t.Fatalf("exit code %d", code)
	}
}

func TestServeUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		out  string
	}{
		{[]string{"serve", "-h"}, exitOK, "usage: spine serve"},
		{[]string{"serve", "--slots", "-1"}, exitUsage, "must not be negative"},
		{[]string{"serve", "--max-timeout", "0s"}, exitUsage, "must not be negative"},
		{[]string{"serve", "--frobnicate"}, exitUsage, "flag provided but not defined"},
		{[]string{"serve", "extra"}, exitUsage, `unexpected argument "extra"`},
		{[]string{"serve", "--config", "/no/such/spine.json"}, exitUsage, "no such file"},
		{[]string{"serve", "--session-memory", "32"}, exitUsage, "--session-memory must be from 64"},
		{[]string{"serve", "--session-memory", "512"}, exitUsage, "--session-memory must be from 64"},
		{[]string{"serve", "--sessions", "0"}, exitUsage, "--sessions and --live-sessions must be positive"},
		{[]string{"serve", "--session-ttl", "-1s"}, exitUsage, "--session-ttl not negative"},
		{[]string{"serve", "--session-store", "mem://", "--session-write", "sometimes"}, exitUsage, "--session-write"},
		{[]string{"serve", "--session-write", "run"}, exitUsage, "--session-write needs --session-store or --session-dir"},
		{[]string{"mcp", "-h"}, exitOK, "usage: spine mcp"},
		{[]string{"mcp", "--config", "/no/such/spine.json"}, exitUsage, "no such file"},
		{[]string{"mcp", "--timeout", "0s"}, exitUsage, "must be positive"},
		{[]string{"mcp", "extra"}, exitUsage, `unexpected argument "extra"`},
	} {
		var stdout, stderr bytes.Buffer
		code := run(tc.args, &stdout, &stderr)
		if code != tc.code || !strings.Contains(stdout.String()+stderr.String(), tc.out) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", tc.args, code, stdout.String(), stderr.String())
		}
	}
}
