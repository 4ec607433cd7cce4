package mcpconfig_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/internal/spinetest"
	"github.com/spine-run/spine/mcpconfig"
)

func TestMain(m *testing.M) {
	spinetest.ServeMCPIfAsked()
	os.Exit(m.Run())
}

// httpServer serves the test MCP server with streamable HTTP on a loopback
// port, to requests that carry the token "sesame"; it returns its URL.
func httpServer(t *testing.T) string {
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
// binary, with env added to its env) and a streamable HTTP server "web",
// both the test MCP server.
func testConfig(t *testing.T, env map[string]string) string {
	t.Helper()
	t.Setenv("SPINE_TEST_TOKEN", "sesame")
	calcEnv := map[string]string{spinetest.MCPServerEnv: "1", "GREETING": "hello from calc"}
	maps.Copy(calcEnv, env)
	cfg := map[string]any{
		"servers": map[string]any{
			"calc": map[string]any{
				"command":     []string{os.Args[0]},
				"env":         calcEnv,
				"early_reads": []string{"add", "echo"},
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
	var want []string
	for _, tool := range []string{"add", "echo", "fail", "get_issue", "getenv", "lines", "picture", "slow"} {
		want = append(want, "calc."+tool, "web."+tool)
	}
	want = append(want, "calc.crash")
	slices.Sort(want)
	if got := slices.Sorted(maps.Keys(m)); !reflect.DeepEqual(got, want) {
		t.Fatalf("tools %v\nwant %v", got, want)
	}
	// Early reads: the config's allow-list only, whatever the annotations say.
	for name, spec := range m {
		early := name == "calc.add" || name == "calc.echo"
		if spec.AllowEarlyRead != early {
			t.Errorf("%s: AllowEarlyRead %v, want %v", name, spec.AllowEarlyRead, early)
		}
	}
	if v, err := call(t, m, "calc.getenv", `{"name": "GREETING"}`); err != nil || v != "hello from calc" {
		t.Errorf("calc.getenv: %v %v", v, err)
	}
	if v, err := call(t, m, "web.add", `{"a": 1, "b": 2}`); err != nil || jsonText(v) != `{"sum":3}` {
		t.Errorf("web.add: %v %v", v, err)
	}
	if _, err := call(t, m, "web.fail", `{"reason": "a test"}`); err == nil || err.Error() != "failed on purpose: a test" {
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
		{"misspelt field", `{"servers": {"a": {"command": ["x"], "early_read": ["y"]}}}`, `unknown field "early_read"`},
		{"two values", `{} {}`, "more than one JSON value"},
		{"command and url", `{"servers": {"a": {"command": ["x"], "url": "http://h/"}}}`, "both a command and a url"},
		{"neither", `{"servers": {"a": {}}}`, "needs a command"},
		{"namespace not an identifier", `{"servers": {"a": {"command": ["x"], "namespace": "my-server"}}}`, "must be a Python identifier"},
		{"keyword namespace", `{"servers": {"a": {"command": ["x"], "namespace": "class"}}}`, "must be a Python identifier"},
		{"stdlib namespace", `{"mcpServers": {"time": {"command": "x"}}}`, `set "namespace" to "time_mcp"`},
		{"headers for a command", `{"servers": {"a": {"command": ["x"], "headers": {"k": "v"}}}}`, "headers are for a url"},
		{"env for a url", `{"servers": {"a": {"url": "http://h/", "env": {"k": "v"}}}}`, "env and dir are for a command"},
		{"bad url", `{"servers": {"a": {"url": "ftp://h/"}}}`, "not an http(s) URL"},
		{"bad timeout", `{"servers": {"a": {"url": "http://h/", "timeout": "forever"}}}`, "bad timeout"},
		{"unset variable", `{"servers": {"a": {"url": "http://h/", "headers": {"Authorization": "Bearer ${SPINE_TEST_NOT_SET}"}}}}`, `"SPINE_TEST_NOT_SET" is not set`},
		{"unclosed variable", `{"servers": {"a": {"command": ["x"], "env": {"K": "${HOME"}}}}`, "unclosed ${"},
		{"reserved name", `{"servers": {"lookup": {"command": ["x"]}}}`, "taken by the built-in tool lookup"},
		{"reserved namespace set", `{"mcpServers": {"a": {"command": "x", "namespace": "lookup"}}}`, `server "a": the namespace lookup is taken by the built-in tool lookup: set "namespace" to another`},
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
		{"early read of a tool the server lacks", fmt.Sprintf(`{"servers": {"a": {"command": [%q], "env": {%q: "1"}, "early_reads": ["rm_rf"]}}}`, os.Args[0], spinetest.MCPServerEnv), "rm_rf"},
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
	tools := load(t, testConfig(t, map[string]string{spinetest.MCPGateEnv: gate}), nil)
	m := tools.Manifest()
	checkAdd := func(name string) {
		t.Helper()
		if v, err := call(t, m, name, `{"a": 1, "b": 2}`); err != nil || jsonText(v) != `{"sum":3}` {
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
	spinetest.WaitFor(t, "calc to come back", func() bool { return tools.Health()["calc"] == "" })
	checkAdd("calc.add")
	checkAdd("web.add")
}
