package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spine-run/spine"
)

// mcpServerEnv makes the test binary an MCP server over stdio (see init in
// run_test.go), for config files whose command is the test binary itself.
const mcpServerEnv = "SPINE_TEST_MCP_SERVER"

// newTestMCPServer has four tools, listed two per page. Each claims to be
// read-only: the annotation must not be enough for an early read.
func newTestMCPServer() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "spine-cmd-test", Version: "v0"}, &mcp.ServerOptions{PageSize: 2})
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

func serveTestMCP() int {
	if err := newTestMCPServer().Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		fmt.Fprintln(os.Stderr, "test MCP server:", err)
		return 1
	}
	return 0
}

// httpMCP serves the test server with streamable HTTP on a loopback port and
// returns its URL.
func httpMCP(t *testing.T) string {
	t.Helper()
	server := newTestMCPServer()
	var auth string
	handler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if auth = r.Header.Get("Authorization"); auth != "Bearer sesame" {
			http.Error(w, "who are you?", http.StatusUnauthorized)
			return
		}
		handler.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	return ts.URL + "/mcp"
}

// testConfig writes a config file with a stdio server "calc" (this test
// binary) and a streamable HTTP server "web".
func testConfig(t *testing.T) string {
	t.Helper()
	t.Setenv("SPINE_TEST_TOKEN", "sesame") // for spine subprocesses too
	cfg := map[string]any{
		"servers": map[string]any{
			"calc": map[string]any{
				"command":     []string{os.Args[0]},
				"env":         map[string]string{mcpServerEnv: "1", "GREETING": "hello from calc"},
				"early_reads": []string{"add", "echo-text"},
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
	m, closeTools, err := loadManifest(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	closeTools()
	if got := toolNames(m); !reflect.DeepEqual(got, []string{"lookup", "prices.list"}) {
		t.Fatalf("demo tools %v", got)
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
	m, closeTools, err := loadManifest(ctx, testConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	defer closeTools()
	want := []string{"calc.add", "calc.echo_text", "calc.fail", "calc.getenv", "lookup", "prices.list", "web.add", "web.echo_text", "web.fail", "web.getenv"}
	if got := toolNames(m); !reflect.DeepEqual(got, want) {
		t.Fatalf("tools %v\nwant %v", got, want)
	}
	// Early reads: the config's allow-list only, whatever the annotations say.
	for name, spec := range m {
		early := name == "calc.add" || name == "calc.echo_text" || name == "lookup" || name == "prices.list"
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
	if v, err := call("web.add", `{"a": 1, "b": 2}`); err != nil || fmt.Sprint(v) != "map[sum:3]" {
		t.Errorf("web.add: %v %v", v, err)
	}
	if _, err := call("web.fail", `{}`); err == nil || err.Error() != "it failed" {
		t.Errorf("web.fail: %v", err)
	}
	closeTools()
	closeTools() // twice is fine
	if _, err := call("calc.add", `{"a": 1, "b": 2}`); err == nil {
		t.Error("a call after closing succeeded")
	}
}

func TestConfigErrors(t *testing.T) {
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
		{"built-in name", `{"servers": {"lookup": {"command": ["x"]}}}`, "taken by the built-in tool lookup"},
		{"built-in namespace", `{"servers": {"prices": {"command": ["x"]}}}`, "taken by the built-in tool prices.list"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := loadManifest(context.Background(), writeFile(t, "c.json", c.config))
			if !errors.Is(err, errConfig) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want a config error with %q", err, c.want)
			}
		})
	}
	if _, _, err := loadManifest(context.Background(), "/no/such/file.json"); !errors.Is(err, errConfig) {
		t.Fatalf("missing file: %v", err)
	}
}

func TestServerErrors(t *testing.T) {
	for _, c := range []struct{ name, config, want string }{
		{"no such command", `{"servers": {"a": {"command": ["/no/such/server"]}}}`, "no such file"},
		{"server exits", `{"servers": {"a": {"command": ["/bin/false"], "timeout": "5s"}}}`, "server a"},
		{"nothing listening", `{"servers": {"a": {"url": "http://127.0.0.1:1/mcp", "timeout": "5s"}}}`, "server a"},
		{"early read of a tool the server lacks", fmt.Sprintf(`{"servers": {"a": {"command": [%q], "env": {%q: "1"}, "early_reads": ["rm_rf"]}}}`, os.Args[0], mcpServerEnv), "rm_rf"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := loadManifest(context.Background(), writeFile(t, "c.json", c.config))
			if err == nil || errors.Is(err, errConfig) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want a server error with %q", err, c.want)
			}
		})
	}
}

// TestRunWithMCPServers: the spine command (a subprocess) runs a program that
// calls tools of an MCP server it started (a subprocess) and of one over HTTP.
func TestRunWithMCPServers(t *testing.T) {
	config := testConfig(t)
	prog := `
total = calc.add(a=inputs["a"], b=2)["sum"]
echo = web.echo_text(text="hi")
try:
    calc.fail()
except RuntimeError as err:
    failure = str(err)
result = {"total": total, "echo": echo, "failure": failure, "greeting": calc.getenv(name="GREETING")}
`
	want := `{"total":42,"echo":"hi","failure":"it failed","greeting":"hello from calc"}`
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
