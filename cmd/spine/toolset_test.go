package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spine-run/spine"
	"github.com/spine-run/spine/internal/spinetest"
	"github.com/spine-run/spine/mcpconfig"
)

// httpMCP serves spinetest's MCP server with streamable HTTP on a loopback
// port, to requests that carry the token "sesame"; it returns its URL.
func httpMCP(t *testing.T) string {
	t.Helper()
	handler := spinetest.MCPHandler(spinetest.NewMCPServer(2))
	ts := spinetest.ServeHTTP(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer sesame" {
			http.Error(w, "who are you?", http.StatusUnauthorized)
			return
		}
		handler.ServeHTTP(w, r)
	}))
	return ts.URL + "/mcp"
}

// testConfig writes a config file with a stdio server "calc" (this test
// binary as spinetest's MCP server) and a streamable HTTP server "web".
func testConfig(t *testing.T) string {
	t.Helper()
	return testConfigEnv(t, nil)
}

// testConfigEnv is testConfig with more of calc's env.
func testConfigEnv(t *testing.T, env map[string]string) string {
	t.Helper()
	t.Setenv("SPINE_TEST_TOKEN", "sesame") // for spine subprocesses too
	calcEnv := map[string]string{spinetest.MCPServerEnv: "1", "GREETING": "hello from calc"}
	maps.Copy(calcEnv, env)
	cfg := map[string]any{
		"servers": map[string]any{
			"calc": map[string]any{
				"command":     []string{os.Args[0]},
				"env":         calcEnv,
				"early_reads": []string{"add", "get-issue"},
			},
			"web": map[string]any{
				"url":     httpMCP(t),
				"headers": map[string]string{"Authorization": "Bearer ${SPINE_TEST_TOKEN}"},
				"timeout": "10s",
			},
		},
	}
	data, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return writeFile(t, "spine.json", string(data))
}

func TestLoadManifestDemo(t *testing.T) {
	tools, err := loadManifest(context.Background(), "", true, serverLogs{}, false)
	if err != nil {
		t.Fatal(err)
	}
	tools.close()
	if got := toolNames(tools.manifest); !reflect.DeepEqual(got, []string{"lookup", "prices.list"}) {
		t.Fatalf("demo tools %v", got)
	}
	// Without the demo tools and a config: nothing.
	tools, err = loadManifest(context.Background(), "", false, serverLogs{}, false)
	if err != nil {
		t.Fatal(err)
	}
	tools.close()
	if len(tools.manifest) != 0 || len(tools.health()) != 0 {
		t.Fatalf("tools %v, health %v", toolNames(tools.manifest), tools.health())
	}
}

// TestOpenRunnerDemo: the Runner of serve and mcp has the demo tools only
// when asked.
func TestOpenRunnerDemo(t *testing.T) {
	for _, demo := range []bool{false, true} {
		var stderr strings.Builder
		runner, manifest, health, closeRunner, code := openRunner(t.Context(), "", demo, nil, serverLogs{stderr: &stderr}, serverLog{name: "spine test", w: &stderr}, true)
		if runner == nil {
			t.Fatalf("exit %d: %s", code, stderr.String())
		}
		out, err := runner.Run(t.Context(), spine.Request{Source: "try:\n    result = lookup(key='book')\nexcept NameError:\n    result = 'no lookup'\n"})
		closeRunner()
		if err != nil {
			t.Fatal(err)
		}
		want := `"no lookup"`
		if demo {
			want = "21"
		}
		if _, ok := manifest["lookup"]; ok != demo || string(out.Value) != want {
			t.Errorf("demo %v: manifest %v, value %s", demo, toolNames(manifest), out.Value)
		}
		if len(health()) != 0 {
			t.Errorf("health %v", health())
		}
	}
}

func toolNames(m spine.Manifest) []string {
	var names []string
	for name := range m {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

func TestLoadManifestMCP(t *testing.T) {
	ctx := context.Background()
	tools, err := loadManifest(ctx, testConfig(t), true, serverLogs{}, false)
	if err != nil {
		t.Fatal(err)
	}
	m, closeTools := tools.manifest, tools.close
	defer closeTools()
	want := []string{"calc.add", "calc.crash", "calc.echo", "calc.fail", "calc.get_issue", "calc.getenv", "calc.lines", "calc.picture", "calc.slow", "lookup", "prices.list",
		"web.add", "web.echo", "web.fail", "web.get_issue", "web.getenv", "web.lines", "web.picture", "web.slow"}
	if got := toolNames(m); !reflect.DeepEqual(got, want) {
		t.Fatalf("tools %v\nwant %v", got, want)
	}
	// Early reads: the config's allow-list only, whatever the annotations say.
	for name, spec := range m {
		early := name == "calc.add" || name == "calc.get_issue" || name == "lookup" || name == "prices.list"
		if spec.AllowEarlyRead != early {
			t.Errorf("%s: AllowEarlyRead %v, want %v", name, spec.AllowEarlyRead, early)
		}
	}
	call := func(name, args string) (any, error) {
		return m[name].Call(ctx, json.RawMessage(args))
	}
	if v, err := call("calc.getenv", `{"name": "GREETING"}`); err != nil || v != "hello from calc" {
		t.Errorf("calc.getenv: %v %v", v, err)
	}
	if v, err := call("web.add", `{"a": 1, "b": 2}`); err != nil || jsonText(v) != `{"sum":3}` {
		t.Errorf("web.add: %v %v", v, err)
	}
	if _, err := call("web.fail", `{"reason": "test"}`); err == nil || err.Error() != "failed on purpose: test" {
		t.Errorf("web.fail: %v", err)
	}
	if h := tools.health(); !reflect.DeepEqual(h, map[string]string{"calc": "", "web": ""}) {
		t.Errorf("health %v", h)
	}
	closeTools()
	closeTools() // twice is fine
	if _, err := call("calc.add", `{"a": 1, "b": 2}`); err == nil {
		t.Error("a call after closing succeeded")
	}
}

// TestConfigErrors: with --demo-tools, a server may not take a demo tool's
// name (mcpconfig's tests check the rest of the file).
func TestConfigErrors(t *testing.T) {
	for _, c := range []struct{ name, config, want string }{
		{"built-in name", `{"servers": {"lookup": {"command": ["x"]}}}`, "taken by the built-in tool lookup"},
		{"built-in namespace", `{"servers": {"prices": {"command": ["x"]}}}`, "taken by the built-in tool prices.list"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := loadManifest(context.Background(), writeFile(t, "c.json", c.config), true, serverLogs{}, false)
			if !errors.Is(err, mcpconfig.ErrConfig) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want a config error with %q", err, c.want)
			}
		})
	}
	if _, err := loadManifest(context.Background(), "/no/such/file.json", false, serverLogs{}, false); !errors.Is(err, mcpconfig.ErrConfig) {
		t.Fatalf("missing file: %v", err)
	}
	// Without the demo tools, their names are free.
	_, err := loadManifest(context.Background(), writeFile(t, "c.json", `{"servers": {"lookup": {"command": ["/no/such/server"]}}}`), false, serverLogs{}, false)
	if err == nil || errors.Is(err, mcpconfig.ErrConfig) || !strings.Contains(err.Error(), "/no/such/server") {
		t.Fatalf("a server named lookup without the demo tools: %v", err)
	}
}

// TestRunWithMCPServers: the spine command (a subprocess) runs a program that
// calls tools of an MCP server it started (a subprocess) and of one over HTTP.
func TestRunWithMCPServers(t *testing.T) {
	config := testConfig(t)
	prog := `
total = calc.add(a=inputs["a"], b=2)["sum"]
echo = web.echo(text="hi")
try:
    calc.fail(reason="from Python")
except RuntimeError as err:
    failure = str(err)
result = {"total": total, "echo": echo, "failure": failure, "greeting": calc.getenv(name="GREETING")}
`
	want := `{"total":42,"echo":"hi","failure":"failed on purpose: from Python","greeting":"hello from calc"}`
	for _, early := range []string{"--early-reads=false", "--early-reads"} {
		r := spineCLI(t, prog, "run", "--json", "--config", config, "--inputs", `{"a": 40}`, early, "-")
		res := decodeJSON(t, r)
		if r.code != 0 || compact(t, res.Value) != want {
			t.Errorf("%s: exit %d, value %s, error %+v, stderr %s", early, r.code, res.Value, res.Error, r.stderr)
		}
	}

	// SPINE_CONFIG names the config when --config does not.
	cmd := spineCmd(t, "run", "-")
	cmd.Env = append(cmd.Env, "SPINE_CONFIG="+config)
	cmd.Stdin = strings.NewReader(`calc.add(a=1, b=1)["sum"]`)
	if out, err := cmd.Output(); err != nil || string(out) != "2\n" {
		t.Errorf("with SPINE_CONFIG: %q %v", out, err)
	}

	// A server that cannot start: exit 4. A bad config: exit 2.
	broken := writeFile(t, "broken.json", `{"servers": {"gone": {"command": ["/no/such/server"]}}}`)
	spineCLI(t, "1", "run", "--config", broken, "-").check(t, 4, "", "/no/such/server")
	bad := writeFile(t, "bad.json", `{"servers": {"gone": {}}}`)
	spineCLI(t, "1", "run", "--config", bad, "-").check(t, 2, "", "needs a command")
}

func spineCmd(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), cliEnv+"=1")
	return cmd
}

// TestDemoToolsFlag: spine run, serve and mcp, as processes, offer the demo
// tools only with --demo-tools.
func TestDemoToolsFlag(t *testing.T) {
	const prog = "try:\n    result = lookup(key='book')\nexcept NameError:\n    result = 'no lookup'\n"
	spineCLI(t, prog, "run", "-").check(t, 0, "\"no lookup\"\n")
	spineCLI(t, prog, "run", "--demo-tools", "-").check(t, 0, "21\n")

	t.Setenv(cliEnv, "1") // the test binary is spine in the processes below
	t.Setenv("SPINE_CONFIG", "")
	for _, demo := range []bool{false, true} {
		args := []string{"serve", "--listen", "127.0.0.1:0"}
		want := `"no lookup"`
		if demo {
			args, want = append(args, "--demo-tools"), "21"
		}
		p, addr := start(t, os.Args[0], args...)
		status, a, err := postRun(t, "http://"+addr, fmt.Sprintf(`{"source": %q}`, prog))
		if err != nil || status != 200 || string(a.Value) != want {
			t.Errorf("serve, demo %v: %v, status %d, %+v", demo, err, status, a)
		}
		p.cmd.Process.Signal(os.Interrupt)
		p.wait(t)

		args = []string{"mcp"}
		if demo {
			args = append(args, "--demo-tools")
		}
		client := mcp.NewClient(&mcp.Implementation{Name: "spine-test", Version: "v0"}, nil)
		cs, err := client.Connect(t.Context(), &mcp.CommandTransport{Command: exec.Command(os.Args[0], args...)}, nil)
		if err != nil {
			t.Fatal(err)
		}
		listed, err := cs.ListTools(t.Context(), nil)
		cs.Close()
		if err != nil || len(listed.Tools) != 1 {
			t.Fatalf("mcp: %v %v", listed, err)
		}
		if has := strings.Contains(listed.Tools[0].Description, "def lookup("); has != demo {
			t.Errorf("mcp, demo %v: the description lists lookup: %v", demo, has)
		}
	}
}

// TestServeHealth: spine serve, as a process, reports its MCP servers on
// /healthz: a stdio server whose process ended is down until it is back.
func TestServeHealth(t *testing.T) {
	gate := filepath.Join(t.TempDir(), "gate")
	config := testConfigEnv(t, map[string]string{spinetest.MCPGateEnv: gate})
	t.Setenv(cliEnv, "1") // the test binary is spine in the process below
	p, addr := start(t, os.Args[0], "serve", "--listen", "127.0.0.1:0", "--config", config)
	url := "http://" + addr
	healthz := func() (status string, components map[string]string) {
		t.Helper()
		resp, err := http.Get(url + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var h struct {
			Status     string
			Components map[string]string
		}
		if err := json.NewDecoder(resp.Body).Decode(&h); err != nil || resp.StatusCode != 200 {
			t.Fatalf("/healthz: %d %v", resp.StatusCode, err)
		}
		return h.Status, h.Components
	}
	if status, c := healthz(); status != "ok" || !reflect.DeepEqual(c, map[string]string{"calc": "ok", "web": "ok"}) {
		t.Fatalf("/healthz: %s %v", status, c)
	}

	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	status, a, err := postRun(t, url, `{"source": "calc.crash()"}`)
	if err != nil || status != 422 || a.Error == nil || !strings.Contains(a.Error.Message, "mcp server calc is down") {
		t.Fatalf("calc.crash(): %v, status %d, %+v", err, status, a)
	}
	status, a, err = postRun(t, url, `{"source": "web.add(a=1, b=2)['sum']"}`)
	if err != nil || status != 200 || string(a.Value) != "3" {
		t.Fatalf("web.add while calc is down: %v, status %d, %+v", err, status, a)
	}
	if s, c := healthz(); s != "degraded" || !strings.HasPrefix(c["calc"], "mcp server calc is down: ") || c["web"] != "ok" {
		t.Fatalf("/healthz while calc is down: %s %q", s, c)
	}

	if err := os.Remove(gate); err != nil {
		t.Fatal(err)
	}
	spinetest.WaitFor(t, "calc to be back", func() bool { s, _ := healthz(); return s == "ok" })
	status, a, err = postRun(t, url, `{"source": "calc.add(a=1, b=2)['sum']"}`)
	if err != nil || status != 200 || string(a.Value) != "3" {
		t.Fatalf("calc.add after the restart: %v, status %d, %+v", err, status, a)
	}
	p.cmd.Process.Signal(os.Interrupt)
	if code := p.wait(t); code != 0 {
		t.Errorf("exit code %d", code)
	}
}

// TestServerStderr: an MCP server's standard error goes to its log file in
// the user's state folder, and to the terminal only with --verbose, which
// also says what the config left out.
func TestServerStderr(t *testing.T) {
	state := t.TempDir()
	t.Setenv("XDG_STATE_HOME", state)
	config := writeFile(t, "c.json", fmt.Sprintf(`{"mcpServers": {"calc": {"command": %q, "env": {%q: "1", %q: "warning: noisy\n"}, "autoApprove": ["add"]}}}`,
		os.Args[0], spinetest.MCPServerEnv, spinetest.MCPStderrEnv))
	for _, verbose := range []bool{false, true} {
		args := []string{"tools", "--config", config}
		if verbose {
			args = append(args, "--verbose")
		}
		var stdout, stderr bytes.Buffer
		if code := run(args, &stdout, &stderr); code != exitOK || !strings.Contains(stdout.String(), "def add(") {
			t.Fatalf("%q: exit %d\n%s%s", args, code, stdout.String(), stderr.String())
		}
		log, err := os.ReadFile(filepath.Join(state, "spine", "logs", "calc.log"))
		if err != nil || string(log) != "warning: noisy\n" {
			t.Errorf("%q: calc.log %q %v", args, log, err)
		}
		shown := strings.Contains(stderr.String(), "[calc] warning: noisy\n")
		noted := strings.Contains(stderr.String(), `server \"calc\": ignored \"autoApprove\"`)
		if shown != verbose || noted != verbose {
			t.Errorf("%q: stderr %q", args, stderr.String())
		}
	}
}
