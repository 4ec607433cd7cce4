package mcpconfig_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spine-run/spine"
	"github.com/spine-run/spine/mcpconfig"
)

// serverEnv makes the test binary an MCP server over stdio (see TestMain),
// for config files whose command is the test binary itself.
const serverEnv = "SPINE_MCPCONFIG_TEST_SERVER"

// gateEnv names a file: while it exists, the test MCP server refuses to
// start (it exits at once), so that a test can keep it down.
const gateEnv = "SPINE_MCPCONFIG_TEST_GATE"

func TestMain(m *testing.M) {
	if os.Getenv(serverEnv) == "1" {
		os.Exit(serveStdio())
	}
	os.Exit(m.Run())
}

// newServer has four tools, listed two per page. Each claims to be read-only:
// the annotation must not be enough for an early read.
func newServer() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "spine-mcpconfig-test", Version: "v0"}, &mcp.ServerOptions{PageSize: 2})
	readOnly := &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true}
	type addIn struct {
		A int `json:"a" jsonschema:"the first addend"`
		B int `json:"b" jsonschema:"the second addend"`
	}
	type addOut struct {
		Sum int `json:"sum"`
	}
	mcp.AddTool(s, &mcp.Tool{Name: "add", Description: "Add two integers.", Annotations: readOnly},
		func(ctx context.Context, req *mcp.CallToolRequest, in addIn) (*mcp.CallToolResult, addOut, error) {
			return nil, addOut{Sum: in.A + in.B}, nil
		})
	text := func(name, description, schema string, answer func(args map[string]any) (string, bool)) {
		s.AddTool(&mcp.Tool{Name: name, Description: description, InputSchema: json.RawMessage(schema), Annotations: readOnly},
			func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				var args map[string]any
				if err := json.Unmarshal(req.Params.Arguments, &args); err != nil {
					return nil, err
				}
				out, failed := answer(args)
				return &mcp.CallToolResult{IsError: failed, Content: []mcp.Content{&mcp.TextContent{Text: out}}}, nil
			})
	}
	text("echo-text", "Say text back.", `{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`,
		func(args map[string]any) (string, bool) { return fmt.Sprint(args["text"]), false })
	text("fail", "Fail with an error result.", `{"type":"object"}`,
		func(map[string]any) (string, bool) { return "it failed", true })
	text("getenv", "Read the server's environment.", `{"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}`,
		func(args map[string]any) (string, bool) { return os.Getenv(fmt.Sprint(args["name"])), false })
	return s
}

// serveStdio is the test MCP server over stdio, with one more tool, crash,
// which ends the process in the middle of the call.
func serveStdio() int {
	if gate := os.Getenv(gateEnv); gate != "" {
		if _, err := os.Stat(gate); err == nil {
			fmt.Fprintln(os.Stderr, "test MCP server: gate closed")
			return 1
		}
	}
	s := newServer()
	s.AddTool(&mcp.Tool{Name: "crash", Description: "End the server's process.", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			os.Exit(3)
			return nil, nil
		})
	if err := s.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		fmt.Fprintln(os.Stderr, "test MCP server:", err)
		return 1
	}
	return 0
}

// httpServer serves the test server with streamable HTTP on a loopback port,
// to requests that carry the token "sesame"; it returns its URL.
func httpServer(t *testing.T) string {
	t.Helper()
	server := newServer()
	handler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer sesame" {
			http.Error(w, "who are you?", http.StatusUnauthorized)
			return
		}
		handler.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	return ts.URL + "/mcp"
}

// testConfig writes a config file with a stdio server "calc" (this test
// binary, with env added to its env) and a streamable HTTP server "web".
func testConfig(t *testing.T, env map[string]string) string {
	t.Helper()
	t.Setenv("SPINE_TEST_TOKEN", "sesame")
	calcEnv := map[string]string{serverEnv: "1", "GREETING": "hello from calc"}
	maps.Copy(calcEnv, env)
	cfg := map[string]any{
		"servers": map[string]any{
			"calc": map[string]any{
				"command":     []string{os.Args[0]},
				"env":         calcEnv,
				"early_reads": []string{"add", "echo-text"},
			},
			"web": map[string]any{
				"url":     httpServer(t),
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

func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// load is Load with the servers closed when the test ends.
func load(t *testing.T, path string, opts *mcpconfig.Options) *mcpconfig.Toolset {
	t.Helper()
	tools, err := mcpconfig.Load(t.Context(), path, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tools.Close() })
	return tools
}

func call(t *testing.T, m spine.Manifest, name, args string) (any, error) {
	t.Helper()
	tool, ok := m[name]
	if !ok {
		t.Fatalf("no tool %s", name)
	}
	return tool.Call(t.Context(), json.RawMessage(args))
}

func TestLoad(t *testing.T) {
	tools := load(t, testConfig(t, nil), nil)
	m := tools.Manifest()
	want := []string{"calc.add", "calc.crash", "calc.echo_text", "calc.fail", "calc.getenv", "web.add", "web.echo_text", "web.fail", "web.getenv"}
	if got := slices.Sorted(maps.Keys(m)); !reflect.DeepEqual(got, want) {
		t.Fatalf("tools %v\nwant %v", got, want)
	}
	// Early reads: the config's allow-list only, whatever the annotations say.
	for name, spec := range m {
		early := name == "calc.add" || name == "calc.echo_text"
		if spec.AllowEarlyRead != early {
			t.Errorf("%s: AllowEarlyRead %v, want %v", name, spec.AllowEarlyRead, early)
		}
	}
	if v, err := call(t, m, "calc.getenv", `{"name": "GREETING"}`); err != nil || v != "hello from calc" {
		t.Errorf("calc.getenv: %v %v", v, err)
	}
	if v, err := call(t, m, "web.add", `{"a": 1, "b": 2}`); err != nil || fmt.Sprint(v) != "map[sum:3]" {
		t.Errorf("web.add: %v %v", v, err)
	}
	if _, err := call(t, m, "web.fail", `{}`); err == nil || err.Error() != "it failed" {
		t.Errorf("web.fail: %v", err)
	}
	if h := tools.Health(); !reflect.DeepEqual(h, map[string]string{"calc": "", "web": ""}) {
		t.Errorf("health %v", h)
	}
	// A new map each time.
	delete(m, "calc.add")
	if _, ok := tools.Manifest()["calc.add"]; !ok {
		t.Error("Manifest returned the map it keeps")
	}
	tools.Close()
	tools.Close() // twice is fine
	if _, err := call(t, tools.Manifest(), "calc.add", `{"a": 1, "b": 2}`); err == nil {
		t.Error("a call after closing succeeded")
	}
}

// TestNil: a nil Toolset has no servers.
func TestNil(t *testing.T) {
	var tools *mcpconfig.Toolset
	if len(tools.Manifest()) != 0 || len(tools.Health()) != 0 || tools.Close() != nil {
		t.Fatal("a nil Toolset has something")
	}
}

func TestConfigErrors(t *testing.T) {
	reserved := &mcpconfig.Options{Reserved: []string{"lookup", "prices.list"}}
	for _, c := range []struct{ name, config, want string }{
		{"not JSON", `{"servers": `, "unexpected EOF"},
		{"unknown field", `{"servers": {"a": {"command": ["x"], "early_read": ["y"]}}}`, `unknown field "early_read"`},
		{"two values", `{} {}`, "more than one JSON value"},
		{"command and url", `{"servers": {"a": {"command": ["x"], "url": "http://h/"}}}`, "both a command and a url"},
		{"neither", `{"servers": {"a": {}}}`, "needs a command"},
		{"name not an identifier", `{"servers": {"my-server": {"command": ["x"]}}}`, "must be a Python identifier"},
		{"keyword name", `{"servers": {"class": {"command": ["x"]}}}`, "must be a Python identifier"},
		{"headers for a command", `{"servers": {"a": {"command": ["x"], "headers": {"k": "v"}}}}`, "headers are for a url"},
		{"env for a url", `{"servers": {"a": {"url": "http://h/", "env": {"k": "v"}}}}`, "env and dir are for a command"},
		{"bad url", `{"servers": {"a": {"url": "ftp://h/"}}}`, "not an http(s) URL"},
		{"bad timeout", `{"servers": {"a": {"url": "http://h/", "timeout": "forever"}}}`, "bad timeout"},
		{"unset variable", `{"servers": {"a": {"url": "http://h/", "headers": {"Authorization": "Bearer ${SPINE_TEST_NOT_SET}"}}}}`, `"SPINE_TEST_NOT_SET" is not set`},
		{"unclosed variable", `{"servers": {"a": {"command": ["x"], "env": {"K": "${HOME"}}}}`, "unclosed ${"},
		{"reserved name", `{"servers": {"lookup": {"command": ["x"]}}}`, "taken by the built-in tool lookup"},
		{"reserved namespace", `{"servers": {"prices": {"command": ["x"]}}}`, "taken by the built-in tool prices.list"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := mcpconfig.Load(t.Context(), writeFile(t, "c.json", c.config), reserved)
			if !errors.Is(err, mcpconfig.ErrConfig) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want a config error with %q", err, c.want)
			}
		})
	}
	if _, err := mcpconfig.Load(t.Context(), "/no/such/file.json", nil); !errors.Is(err, mcpconfig.ErrConfig) {
		t.Fatalf("missing file: %v", err)
	}
	// Without Reserved, every name is free.
	_, err := mcpconfig.Load(t.Context(), writeFile(t, "c.json", `{"servers": {"lookup": {"command": ["/no/such/server"]}}}`), nil)
	if err == nil || errors.Is(err, mcpconfig.ErrConfig) || !strings.Contains(err.Error(), "/no/such/server") {
		t.Fatalf("a server named lookup, nothing reserved: %v", err)
	}
}

func TestServerErrors(t *testing.T) {
	for _, c := range []struct{ name, config, want string }{
		{"no such command", `{"servers": {"a": {"command": ["/no/such/server"]}}}`, "no such file"},
		{"server exits", `{"servers": {"a": {"command": ["/bin/false"], "timeout": "5s"}}}`, "server a"},
		{"nothing listening", `{"servers": {"a": {"url": "http://127.0.0.1:1/mcp", "timeout": "5s"}}}`, "server a"},
		{"early read of a tool the server lacks", fmt.Sprintf(`{"servers": {"a": {"command": [%q], "env": {%q: "1"}, "early_reads": ["rm_rf"]}}}`, os.Args[0], serverEnv), "rm_rf"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := mcpconfig.Load(t.Context(), writeFile(t, "c.json", c.config), nil)
			if err == nil || errors.Is(err, mcpconfig.ErrConfig) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want a server error with %q", err, c.want)
			}
		})
	}
}

// TestServerEnvironment: a server's command gets the config's env and a few
// of the process's variables, not its secrets.
func TestServerEnvironment(t *testing.T) {
	t.Setenv("SPINE_TEST_SECRET", "hunter2")
	m := load(t, testConfig(t, nil), nil).Manifest()
	getenv := func(name string) string {
		t.Helper()
		v, err := call(t, m, "calc.getenv", fmt.Sprintf(`{"name": %q}`, name))
		if err != nil {
			t.Fatal(err)
		}
		return v.(string)
	}
	for _, secret := range []string{"SPINE_TEST_SECRET", "SPINE_TEST_TOKEN"} {
		if v := getenv(secret); v != "" {
			t.Errorf("the server sees %s=%q", secret, v)
		}
	}
	if v := getenv("GREETING"); v != "hello from calc" {
		t.Errorf("GREETING=%q", v)
	}
	for _, name := range []string{"PATH", "HOME"} {
		if v := getenv(name); v != os.Getenv(name) {
			t.Errorf("%s=%q, the process has %q", name, v, os.Getenv(name))
		}
	}
}

// TestServerRestart: a stdio server whose process ends is started again;
// while it is down its tools fail at once naming it, Health says so, and the
// other server is not affected.
func TestServerRestart(t *testing.T) {
	gate := filepath.Join(t.TempDir(), "gate")
	tools := load(t, testConfig(t, map[string]string{gateEnv: gate}), nil)
	m := tools.Manifest()
	checkAdd := func(name string) {
		t.Helper()
		if v, err := call(t, m, name, `{"a": 1, "b": 2}`); err != nil || fmt.Sprint(v) != "map[sum:3]" {
			t.Fatalf("%s: %v %v", name, v, err)
		}
	}

	// Keep calc from starting again, then end its process.
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := call(t, m, "calc.crash", `{}`); err == nil || !strings.HasPrefix(err.Error(), "mcp server calc is down: ") {
		t.Fatalf("calc.crash: %v", err)
	}
	if _, err := call(t, m, "calc.add", `{"a": 1, "b": 2}`); err == nil || !strings.HasPrefix(err.Error(), "mcp server calc is down: ") || !strings.HasSuffix(err.Error(), "; reconnecting") {
		t.Fatalf("calc.add while down: %v", err)
	}
	if h := tools.Health(); !strings.HasPrefix(h["calc"], "mcp server calc is down: ") || h["web"] != "" {
		t.Fatalf("health while calc is down: %q", h)
	}
	checkAdd("web.add")

	// Let it start: it comes back.
	if err := os.Remove(gate); err != nil {
		t.Fatal(err)
	}
	for tools.Health()["calc"] != "" {
		time.Sleep(10 * time.Millisecond)
	}
	checkAdd("calc.add")
	checkAdd("web.add")
}
