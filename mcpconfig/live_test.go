package mcpconfig_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/internal/spinetest"
	"github.com/spine-run/spine/mcpconfig"
)

// pasted is a README's config file with only the program changed: this test
// binary, as the test MCP server in mode, with env added.
func pasted(t *testing.T, readme, mode string, env map[string]string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", readme))
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	for _, entry := range cfg["mcpServers"].(map[string]any) {
		e := entry.(map[string]any)
		e["command"] = os.Args[0]
		envs, _ := e["env"].(map[string]any)
		if envs == nil {
			envs = map[string]any{}
		}
		envs[spinetest.MCPServerEnv] = mode
		for k, v := range env {
			envs[k] = v
		}
		e["env"] = envs
	}
	out, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return writeFile(t, readme, string(out))
}

func names(m spine.Manifest) []string { return slices.Sorted(maps.Keys(m)) }

// TestPastedConfig: the memory server's README config, its program replaced
// by the test server, starts the server with the file's env and args.
func TestPastedConfig(t *testing.T) {
	m := load(t, pasted(t, "memory.json", "1", nil), nil).Manifest()
	if v, err := call(t, m, "memory.getenv", `{"name": "MEMORY_FILE_PATH"}`); err != nil || v != "/path/to/custom/memory.jsonl" {
		t.Fatalf("memory.getenv: %v %v", v, err)
	}
}

// TestToolLists: "tools" keeps only the tools named, "exclude_tools" leaves
// the named ones out; naming a tool the server lacks is a server error
// naming it.
func TestToolLists(t *testing.T) {
	config := func(extra string) string {
		return writeFile(t, "c.json", fmt.Sprintf(`{"mcpServers": {"calc": {"command": %q, "env": {%q: "1"}, %s}}}`, os.Args[0], spinetest.MCPServerEnv, extra))
	}
	m := load(t, config(`"tools": ["add", "get-issue"], "early_reads": ["add"]`), nil).Manifest()
	if got := names(m); !reflect.DeepEqual(got, []string{"calc.add", "calc.get_issue"}) || !m["calc.add"].AllowEarlyRead {
		t.Fatalf("with tools: %v", got)
	}
	m = load(t, config(`"exclude_tools": ["crash", "slow", "getenv"]`), nil).Manifest()
	if got := names(m); !reflect.DeepEqual(got, []string{"calc.add", "calc.echo", "calc.fail", "calc.get_issue", "calc.lines", "calc.picture"}) {
		t.Fatalf("with exclude_tools: %v", got)
	}
	for _, extra := range []string{`"tools": ["add", "rm_rf"]`, `"exclude_tools": ["rm_rf"]`} {
		_, err := mcpconfig.Load(t.Context(), config(extra), nil)
		if err == nil || !strings.Contains(err.Error(), "the tool lists name tools it does not have: rm_rf") {
			t.Errorf("%s: %v", extra, err)
		}
	}
	_, err := mcpconfig.Load(t.Context(), config(`"exclude_tools": ["add"], "early_reads": ["add"]`), nil)
	if err == nil || !strings.Contains(err.Error(), "early_reads") {
		t.Errorf("an early read of an excluded tool: %v", err)
	}
}

// logBuffer is a *slog.Logger's output, safe to read while servers log.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestTaskTools: a tool that can only be called as an MCP task is left out
// of the manifest, over stdio and over streamable HTTP, and the logger
// hears of it; one that only allows tasks stays. Naming it in "tools" is an
// error.
func TestTaskTools(t *testing.T) {
	server := spinetest.NewMCPServer(2)
	spinetest.AddTaskTools(server)
	handler := spinetest.MCPHandler(server)
	ts := spinetest.ServeHTTP(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		handler.ServeHTTP(taskResponse{w, spinetest.TaskTools(w)}, r)
	}))
	var logs logBuffer
	path := writeFile(t, "c.json", fmt.Sprintf(`{"mcpServers": {
		"jobs": {"command": %q, "env": {%q: "tasks"}},
		"web": {"type": "http", "url": %q}}}`, os.Args[0], spinetest.MCPServerEnv, ts.URL+"/mcp"))
	m := load(t, path, &mcpconfig.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))}).Manifest()
	for _, ns := range []string{"jobs", "web"} {
		if _, ok := m[ns+".long_job"]; ok {
			t.Errorf("%s.long_job, which needs tasks, is in the manifest", ns)
		}
		if v, err := call(t, m, ns+".maybe_job", `{}`); err != nil || v != "done" {
			t.Errorf("%s.maybe_job: %v %v", ns, v, err)
		}
		if !strings.Contains(logs.String(), `"mcp tool left out: it can only be called as an MCP task" server="server `+ns+`" tool=long_job`) {
			t.Errorf("the log does not say %s.long_job was left out:\n%s", ns, logs.String())
		}
	}
	if stubs := spine.Stubs(m); strings.Contains(stubs, "long_job") || !strings.Contains(stubs, "maybe_job") {
		t.Errorf("stubs:\n%s", stubs)
	}
	_, err := mcpconfig.Load(t.Context(), writeFile(t, "c.json", fmt.Sprintf(`{"mcpServers": {"jobs": {"command": %q, "env": {%q: "tasks"}, "tools": ["long_job"]}}}`, os.Args[0], spinetest.MCPServerEnv)), nil)
	if err == nil || !strings.Contains(err.Error(), `tool "long_job" can only be called as an MCP task`) {
		t.Errorf("tools naming long_job: %v", err)
	}
}

// taskResponse is a response writer whose body goes through TaskTools.
type taskResponse struct {
	http.ResponseWriter
	body interface{ Write([]byte) (int, error) }
}

func (r taskResponse) Write(p []byte) (int, error) { return r.body.Write(p) }
func (r taskResponse) Flush()                      { http.NewResponseController(r.ResponseWriter).Flush() }

// TestServerStderr: a server's standard error goes to its log file in
// LogDir and, line by line after its namespace, to Options.Stderr; it
// follows the server across restarts, and a new Load begins the file anew.
func TestServerStderr(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "logs")
	config := writeFile(t, "c.json", fmt.Sprintf(`{"mcpServers": {"calc": {"command": %q, "env": {%q: "1", %q: "warning: one\nwarning: two\n"}}}}`,
		os.Args[0], spinetest.MCPServerEnv, spinetest.MCPStderrEnv))
	var terminal logBuffer
	tools, err := mcpconfig.Load(t.Context(), config, &mcpconfig.Options{LogDir: dir, Stderr: &terminal})
	if err != nil {
		t.Fatal(err)
	}
	// The server process ends and is started again: its second start
	// writes to the same file.
	if _, err := call(t, tools.Manifest(), "calc.crash", `{}`); err == nil {
		t.Fatal("calc.crash succeeded")
	}
	spinetest.WaitFor(t, "calc to come back", func() bool { return tools.Health()["calc"] == "" })
	if err := tools.Close(); err != nil { // waits for the processes and their output
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "calc.log"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "warning: one\nwarning: two\n"; string(data) != want+want {
		t.Errorf("calc.log:\n%s", data)
	}
	if want := "[calc] warning: one\n[calc] warning: two\n"; terminal.String() != want+want {
		t.Errorf("Stderr got:\n%s", terminal.String())
	}

	// A new Load begins the file anew.
	load(t, config, &mcpconfig.Options{LogDir: dir}).Close()
	if data, err := os.ReadFile(filepath.Join(dir, "calc.log")); err != nil || string(data) != "warning: one\nwarning: two\n" {
		t.Errorf("calc.log after a new Load: %q %v", data, err)
	}
}
