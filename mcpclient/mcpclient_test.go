package mcpclient_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spine-run/spine"
	"github.com/spine-run/spine/internal/spinetest"
	"github.com/spine-run/spine/mcpclient"
)

// greeting is in the environment of every test server process.
const greeting = "SPINE_TEST_GREETING=hello from the server"

func TestMain(m *testing.M) {
	spinetest.ServeMCPIfAsked()
	os.Exit(m.Run())
}

// stdioTools starts the test server as a subprocess and returns its tools
// under namespace "srv".
func stdioTools(t *testing.T, opts *mcpclient.Options) spine.Manifest {
	t.Helper()
	return connect(t, &mcp.CommandTransport{Command: spinetest.MCPCommand("1", greeting)}, opts)
}

// httpTools serves the test server with streamable HTTP on a loopback port.
func httpTools(t *testing.T, opts *mcpclient.Options) spine.Manifest {
	t.Helper()
	ts := spinetest.ServeHTTP(t, spinetest.MCPHandler(spinetest.NewMCPServer(3)))
	return connect(t, &mcp.StreamableClientTransport{Endpoint: ts.URL, DisableStandaloneSSE: true}, opts)
}

func connect(t *testing.T, transport mcp.Transport, opts *mcpclient.Options) spine.Manifest {
	t.Helper()
	m, session, err := mcpclient.Connect(t.Context(), transport, "srv", opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { session.Close() })
	return m
}

var transports = []struct {
	name  string
	tools func(*testing.T, *mcpclient.Options) spine.Manifest
}{
	{"stdio", stdioTools},
	{"http", httpTools},
}

func names(m spine.Manifest) []string {
	var out []string
	for name := range m {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

func call(t *testing.T, m spine.Manifest, name, args string) (any, error) {
	t.Helper()
	spec, ok := m[name]
	if !ok {
		t.Fatalf("no tool %s in %v", name, names(m))
	}
	return spec.Call(t.Context(), json.RawMessage(args))
}

// asJSON is v as the bridge would send it to Python.
func asJSON(t *testing.T, v any) string {
	t.Helper()
	encoded, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(encoded)
}

func TestTools(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			m := tr.tools(t, &mcpclient.Options{EarlyReads: []string{"add", "get-issue"}})

			// Every tool, across pages of 2 or 3; the server process has
			// crash too.
			want := []string{"srv.add", "srv.echo", "srv.fail", "srv.get_issue", "srv.getenv", "srv.lines", "srv.picture", "srv.slow"}
			if tr.name == "stdio" {
				want = append(want[:1], append([]string{"srv.crash"}, want[1:]...)...)
			}
			if got := names(m); !reflect.DeepEqual(got, want) {
				t.Fatalf("tools %v, want %v", got, want)
			}
			for name, spec := range m {
				early := name == "srv.add" || name == "srv.get_issue"
				if spec.AllowEarlyRead != early {
					t.Errorf("%s: AllowEarlyRead %v, want %v", name, spec.AllowEarlyRead, early)
				}
				if !json.Valid(spec.InputSchema) {
					t.Errorf("%s: input schema %q", name, spec.InputSchema)
				}
			}
			if d := m["srv.get_issue"].Description; !strings.HasPrefix(d, "Return an issue by number") {
				t.Errorf("description %q", d)
			}
			if s := string(m["srv.echo"].InputSchema); !strings.Contains(s, `"what to say"`) {
				t.Errorf("echo schema %s", s)
			}
			if s := string(m["srv.get_issue"].OutputSchema); !strings.Contains(s, `"title"`) {
				t.Errorf("get_issue output schema %s", s)
			}
			if m["srv.echo"].OutputSchema != nil {
				t.Errorf("echo output schema %s", m["srv.echo"].OutputSchema)
			}

			for _, c := range []struct {
				tool, args, want, err string
			}{
				{"srv.add", `{"a": 2, "b": 3}`, `{"sum":5}`, ""},                                                // structuredContent wins over its JSON text
				{"srv.echo", `{"text": "ab", "times": 2}`, `"abab"`, ""},                                        // text content is a str
				{"srv.lines", `{}`, `"first\n{\"n\": 1}"`, ""},                                                  // text parts joined, JSON text stays text
				{"srv.get_issue", `{"number": 7}`, `{"labels":["bug"],"number":7,"title":"Spine crashes"}`, ""}, // called by its MCP name
				{"srv.picture", `{}`, `[{"type":"text","text":"a dot"},{"type":"image","mimeType":"image/png","data":"iVBORw=="}]`, ""},
				{"srv.fail", `{"reason": "test"}`, "", "failed on purpose: test"}, // isError
			} {
				value, err := call(t, m, c.tool, c.args)
				switch {
				case c.err != "":
					if err == nil || err.Error() != c.err {
						t.Errorf("%s: value %v, err %v; want error %q", c.tool, value, err, c.err)
					}
				case err != nil:
					t.Errorf("%s: %v", c.tool, err)
				default:
					if got := asJSON(t, value); got != c.want {
						t.Errorf("%s: value %s, want %s", c.tool, got, c.want)
					}
				}
			}
		})
	}
}

func TestCallCancelled(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			m := tr.tools(t, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			// The tool would sleep for an hour: only the cancellation ends the call.
			_, err := m["srv.slow"].Call(ctx, json.RawMessage(`{"ms": 3600000}`))
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("err = %v, want DeadlineExceeded", err)
			}
			// The session still works.
			if v, err := call(t, m, "srv.echo", `{"text": "ok"}`); err != nil || v != "ok" {
				t.Fatalf("after a cancelled call: %v, %v", v, err)
			}
		})
	}
}

func TestProtocolError(t *testing.T) {
	m := stdioTools(t, nil)
	spec := m["srv.echo"]
	// The echo tool's handler fails to decode an array: the server answers
	// with a JSON-RPC error, which is a Go error too.
	if _, err := spec.Call(context.Background(), json.RawMessage(`[1]`)); err == nil {
		t.Fatal("no error for arguments that are not an object")
	}
}

func TestServerGone(t *testing.T) {
	ctx := context.Background()
	m, session, err := mcpclient.Connect(ctx, &mcp.CommandTransport{Command: spinetest.MCPCommand("1")}, "srv", nil)
	if err != nil {
		t.Fatal(err)
	}
	session.Close()
	if _, err := m["srv.echo"].Call(ctx, json.RawMessage(`{"text": "x"}`)); err == nil {
		t.Fatal("a call over a closed session succeeded")
	}
}

func TestEarlyReadsUnknownTool(t *testing.T) {
	_, _, err := mcpclient.Connect(context.Background(), &mcp.CommandTransport{Command: spinetest.MCPCommand("1")}, "srv", &mcpclient.Options{EarlyReads: []string{"add", "delete_everything"}})
	if err == nil || !strings.Contains(err.Error(), "delete_everything") {
		t.Fatalf("err = %v, want one naming delete_everything", err)
	}
}

// inMemory connects to a server with the given tools over in-memory transports.
func inMemory(t *testing.T, namespace string, tools ...string) (spine.Manifest, error) {
	t.Helper()
	server := mcp.NewServer(&mcp.Implementation{Name: "names", Version: "v0"}, nil)
	for _, name := range tools {
		server.AddTool(&mcp.Tool{Name: name, InputSchema: json.RawMessage(`{"type":"object"}`)},
			func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: name}}}, nil
			})
	}
	clientT, serverT := mcp.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := server.Connect(ctx, serverT, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	m, cs, err := mcpclient.Connect(ctx, clientT, namespace, nil)
	if cs != nil {
		t.Cleanup(func() { cs.Close() })
	}
	return m, err
}

func TestNameCollision(t *testing.T) {
	_, err := inMemory(t, "srv", "get-issue", "get_issue", "other")
	if err == nil || !strings.Contains(err.Error(), `"get-issue" and "get_issue"`) || !strings.Contains(err.Error(), "srv.get_issue") {
		t.Fatalf("err = %v", err)
	}
}

func TestNamespace(t *testing.T) {
	if _, err := inMemory(t, "not-python", "a"); err == nil {
		t.Fatal("a namespace that is not an identifier was accepted")
	}
	m, err := inMemory(t, "", "a.b", "class")
	if err != nil {
		t.Fatal(err)
	}
	if got := names(m); !reflect.DeepEqual(got, []string{"a_b", "class_"}) {
		t.Fatalf("tools %v", got)
	}
	if v, err := call(t, m, "class_", `{}`); err != nil || v != "class" {
		t.Fatalf("class_: %v %v", v, err)
	}
}

func TestPythonName(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"search_issues", "search_issues"},
		{"get-issue", "get_issue"},
		{"repo.search", "repo_search"},
		{"a/b c", "a_b_c"},
		{"2fa", "_2fa"},
		{"__init__", "_init__"},
		{"_private", "_private"},
		{"import", "import_"},
		{"None", "None_"},
		{"café", "caf_"},
		{"---", ""},
		{"", ""},
	} {
		if got := mcpclient.PythonName(c.in); got != c.want {
			t.Errorf("PythonName(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestValue(t *testing.T) {
	for _, c := range []struct {
		name   string
		result *mcp.CallToolResult
		want   string
		err    string
	}{
		{"empty", &mcp.CallToolResult{}, "null", ""},
		{"structured array", &mcp.CallToolResult{StructuredContent: []any{1.0, "x"}, Content: []mcp.Content{&mcp.TextContent{Text: "ignored"}}}, `[1,"x"]`, ""},
		{"structured scalar", &mcp.CallToolResult{StructuredContent: 3.5}, `3.5`, ""},
		{"error without text", &mcp.CallToolResult{IsError: true}, "", "the tool reported an error"},
		{"error wins over structure", &mcp.CallToolResult{IsError: true, StructuredContent: map[string]any{}, Content: []mcp.Content{&mcp.TextContent{Text: "a"}, &mcp.TextContent{Text: "b"}}}, "", "a\nb"},
		{"nil", nil, "", "empty tool result"},
	} {
		v, err := mcpclient.Value(c.result)
		if c.err != "" {
			if err == nil || err.Error() != c.err {
				t.Errorf("%s: err %v, want %q", c.name, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if got := asJSON(t, v); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}

// TestThroughPython: a Go program runs Python in the real Guest, which calls
// tools of an MCP server subprocess and gets their values and errors back.
func TestThroughPython(t *testing.T) {
	m := stdioTools(t, &mcpclient.Options{EarlyReads: []string{"add"}})
	ctx := context.Background()
	r := spinetest.NewRunner(t, m, &spine.Options{PoolSize: -1})
	const source = `
total = srv.add(a=2, b=3)["sum"] + srv.add(a=inputs["n"], b=1)["sum"]
text = srv.echo(text="ab", times=2)
try:
    srv.fail(reason="from Python")
except RuntimeError as err:
    failure = str(err)
issue = srv.get_issue(number=7, state="open")
greeting = srv.getenv(name="SPINE_TEST_GREETING")
help(srv.get_issue)
result = {"total": total, "text": text, "failure": failure, "title": issue["title"], "greeting": greeting}
`
	for _, early := range []bool{false, true} {
		out, err := r.Run(ctx, spine.Request{Source: source, Inputs: map[string]any{"n": 10}, EarlyReads: early})
		if err != nil {
			t.Fatalf("early reads %v: %v", early, err)
		}
		want := `{"total":16,"text":"abab","failure":"failed on purpose: from Python","title":"Spine crashes","greeting":"hello from the server"}`
		if string(out.Value) != want {
			t.Errorf("early reads %v: value %s\nwant %s", early, out.Value, want)
		}
		// help shows the tool's signature and its own docstring, not the
		// stub's classes.
		for _, want := range []string{
			"get_issue(number: int, state: Literal['open', 'closed'] | None = None, **kwargs: Any) -> GetIssueResult\n",
			"    Return an issue by number; the name is not a Python identifier.\n",
			"        number: the issue number\n",
		} {
			if !strings.Contains(out.Stdout, want) || strings.Contains(out.Stdout, "class ") {
				t.Errorf("help(srv.get_issue) printed\n%s\nwithout %q", out.Stdout, want)
			}
		}
	}
}

// TestConnectTaskTools: Connect leaves out a tool that can only be called as
// an MCP task, and keeps one that only allows tasks; Tools and ExcludeTools
// choose among the rest.
func TestConnectTaskTools(t *testing.T) {
	m, session, err := mcpclient.Connect(t.Context(), &mcp.CommandTransport{Command: spinetest.MCPCommand("tasks")}, "jobs",
		&mcpclient.Options{ExcludeTools: []string{"crash", "slow"}})
	if err != nil {
		t.Fatal(err)
	}
	defer session.Close()
	if _, ok := m["jobs.long_job"]; ok {
		t.Error("jobs.long_job, which needs tasks, is in the manifest")
	}
	for _, name := range []string{"jobs.maybe_job", "jobs.add"} {
		if _, ok := m[name]; !ok {
			t.Errorf("%s is missing", name)
		}
	}
	for _, name := range []string{"jobs.crash", "jobs.slow"} {
		if _, ok := m[name]; ok {
			t.Errorf("%s is not excluded", name)
		}
	}
	m2, session2, err := mcpclient.Connect(t.Context(), &mcp.CommandTransport{Command: spinetest.MCPCommand("tasks")}, "jobs",
		&mcpclient.Options{Tools: []string{"add"}})
	if err != nil {
		t.Fatal(err)
	}
	defer session2.Close()
	if len(m2) != 1 {
		t.Errorf("with Tools [add]: %d tools", len(m2))
	}
}
