package codemode_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/codemode"
	"github.com/spine-run/spine/internal/spinetest"
)

// The tests share one Runner of the test tools; gate holds programs.
var (
	testTools = spinetest.NewTools()
	manifest  = testTools.Manifest()
	gate      = testTools.Gate
	runner    *spine.Runner
)

func TestMain(m *testing.M) {
	spinetest.Main(m, &runner, manifest, nil)
}

func TestDefinition(t *testing.T) {
	tool := codemode.New(runner, nil)
	if tool.Name() != "run_python" || tool.Timeout() != codemode.DefaultTimeout {
		t.Errorf("name %q, timeout %v", tool.Name(), tool.Timeout())
	}
	desc := tool.Description()
	for _, want := range []string{
		strings.TrimRight(spine.Stubs(manifest), "\n"), "```python", spinetest.LookupDescription,
		"positionally or by keyword", "TypeError", "RuntimeError", "`inputs`", "`result`", "no JSON form", "traceback",
		"no network", "no subprocesses", "/work", "/tmp", "Nothing persists from one call to the next.",
		"stopped after 30s", "Memory: 256 MiB (MemoryError past it)", "Tool calls: 1024 per run", "stdout and stderr: 1 MiB each",
	} {
		if !strings.Contains(desc, want) {
			t.Errorf("the description lacks %q:\n%s", want, desc)
		}
	}
	if desc != codemode.Description(manifest, nil) {
		t.Errorf("Description differs from the Tool's for a Runner with the default limits")
	}

	params := tool.Parameters()
	props, _ := params["properties"].(map[string]any)
	if params["type"] != "object" || props["source"] == nil || props["inputs"] == nil || props["files"] == nil || props["fresh"] != nil {
		t.Errorf("parameters %v", params)
	}
	if req, _ := params["required"].([]any); len(req) != 1 || req[0] != "source" {
		t.Errorf("required %v", params["required"])
	}
	params["type"] = "changed"
	if tool.Parameters()["type"] != "object" {
		t.Error("Parameters shares its map")
	}
	var in, out map[string]any
	if json.Unmarshal(tool.InputSchema(), &in) != nil || json.Unmarshal(tool.OutputSchema(), &out) != nil || out["type"] != "object" {
		t.Errorf("schemas %s %s", tool.InputSchema(), tool.OutputSchema())
	}

	sessions := codemode.New(runner, &codemode.Options{Sessions: true, Timeout: time.Minute})
	props, _ = sessions.Parameters()["properties"].(map[string]any)
	if props["fresh"] == nil || !strings.Contains(sessions.Description(), "State persists from one call to the next") ||
		!strings.Contains(sessions.Description(), "stopped after 1m0s") {
		t.Errorf("with sessions: %v\n%s", props, sessions.Description())
	}

	empty := codemode.Description(nil, nil)
	if !strings.Contains(empty, "No tools are available") || strings.Contains(empty, "```") {
		t.Errorf("no tools:\n%s", empty)
	}
}

// TestLimitsFromRunner: the description states the Runner's own limits, and
// a shorter time limit of the Runner is the Tool's.
func TestLimitsFromRunner(t *testing.T) {
	r := spinetest.NewRunner(t, manifest, &spine.Options{Timeout: 5 * time.Second, MemoryLimit: 64 << 20, MaxToolCalls: 10, MaxOutput: 1000, PoolSize: -1})
	tool := codemode.New(r, nil)
	if tool.Timeout() != 5*time.Second {
		t.Errorf("timeout %v", tool.Timeout())
	}
	for _, want := range []string{"stopped after 5s", "Memory: 64 MiB", "Tool calls: 10 per run", "stdout and stderr: 1000 bytes each"} {
		if !strings.Contains(tool.Description(), want) {
			t.Errorf("the description lacks %q:\n%s", want, tool.Description())
		}
	}
	res, err := tool.Run(t.Context(), json.RawMessage(`{"source": "for i in range(11): lookup(key='book')"}`))
	if err != nil || !res.IsError || !strings.Contains(res.Text(), "RuntimeError: tool call budget exhausted") {
		t.Errorf("budget: %v %q", err, res.Text())
	}
	r.Close(t.Context())
	if _, err := tool.Run(t.Context(), json.RawMessage(`{"source": "1"}`)); !errors.Is(err, spine.ErrClosed) {
		t.Errorf("a closed Runner: %v", err)
	}
}

func TestRun(t *testing.T) {
	tool := codemode.New(runner, nil)
	for _, c := range []struct {
		name, args string
		isError    bool
		text       string // exact; with prefix, its start
		prefix     bool
	}{
		{"value and output", `{"source": "print('pricing <b>')\nlookup(key='book') * inputs['quantity']", "inputs": {"quantity": 3}}`,
			false, `{"value":63,"stdout":"pricing <b>\n"}`, false},
		{"result global", `{"source": "result = {'a': [1, 2]}\nNone"}`, false, `{"value":{"a":[1,2]},"stdout":""}`, false},
		{"stderr", `{"source": "import sys\nsys.stderr.write('careful\\n')\n1"}`, false, `{"value":1,"stdout":"","stderr":"careful\n"}`, false},
		{"python error", `{"source": "print('partial')\nlookup(key='unicorn')"}`, true,
			"Traceback (most recent call last):\n  File \"<agent>\", line 2, in <module>\n    lookup(key='unicorn')\nRuntimeError: no such key: \"unicorn\"\n\nstdout:\npartial\n", false},
		{"syntax error", `{"source": "def f(:\n  pass"}`, true, "  File \"<agent>\", line 1", true},
		{"no network", `{"source": "import socket\nsocket.create_connection(('example.com', 80))"}`, true, "Traceback", true},
		{"result without a JSON form", `{"source": "class Point:\n    def __repr__(self):\n        return 'Point(1, 2)'\nPoint()"}`, false, `{"value":null,"display":"Point(1, 2)","stdout":""}`, false},
		{"set and complex", `{"source": "[{3}, 1j]"}`, false, `{"value":null,"display":"[{3}, 1j]","stdout":""}`, false},
		{"set", `{"source": "{3}"}`, false, `{"value":[3],"stdout":""}`, false},
		{"source too large", `{"source": "#` + strings.Repeat("x", 1<<20) + `"}`, true, "limit exceeded: source is 1048577 bytes, over the 1048576-byte limit", false},
		{"missing source", `{}`, true, `bad arguments: run_python() missing 1 required keyword-only argument: 'source'`, false},
		{"empty arguments", ``, true, `bad arguments: run_python() missing 1 required keyword-only argument: 'source'`, false},
		{"empty source", `{"source": ""}`, true, `bad arguments: "source" is missing or empty`, false},
		{"not an object", `[1]`, true, "bad arguments: run_python() arguments must be a dict, not list", false},
		{"unknown argument", `{"source": "1", "code": "1"}`, true, `bad arguments: run_python() got an unexpected keyword argument 'code'`, false},
		{"wrong type", `{"source": 5}`, true, "bad arguments: run_python() argument 'source' must be str, not int", false},
		{"inputs not an object", `{"source": "1", "inputs": [1]}`, true, `bad arguments: run_python() argument 'inputs' must be dict, not list`, false},
		{"two values", `{"source": "1"} {"source": "2"}`, true, "bad arguments: run_python() arguments are not one JSON object", false},
		{"bad file name", `{"source": "1", "files": [{"name": "../etc/passwd", "text": ""}]}`, true, `bad arguments: "files": `, true},
		{"text and data", `{"source": "1", "files": [{"name": "a", "text": "x", "data": "eA=="}]}`, true, `bad arguments: file "a" has both text and data; give one`, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			res, err := tool.Run(t.Context(), json.RawMessage(c.args))
			if err != nil {
				t.Fatal(err)
			}
			got := res.Text()
			if res.IsError != c.isError || (c.prefix && !strings.HasPrefix(got, c.text)) || (!c.prefix && got != c.text) {
				t.Errorf("IsError %v, text:\n%s", res.IsError, got)
			}
		})
	}
}

func TestTimeout(t *testing.T) {
	// A limit long enough for the print on a busy machine: the loop never
	// ends, so the run still times out.
	tool := codemode.New(runner, &codemode.Options{Timeout: 2 * time.Second})
	res, err := tool.Run(t.Context(), json.RawMessage(`{"source": "print('spinning')\nwhile True:\n    pass"}`))
	if err != nil || !res.IsError || res.Text() != "TimeoutError: the program did not finish within its time limit of 2s\n\nstdout:\nspinning\n" {
		t.Errorf("%v: %q", err, res.Text())
	}
}

// TestCancel: a call whose ctx ends has no Result: nobody waits for one.
func TestCancel(t *testing.T) {
	tool := codemode.New(runner, nil)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := tool.Run(ctx, json.RawMessage(`{"source": "gate()"}`))
		done <- err
	}()
	<-gate.Entered
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled call: %v", err)
	}
}

func TestFiles(t *testing.T) {
	tool := codemode.New(runner, nil)
	res, err := tool.Run(t.Context(), json.RawMessage(`{
		"source": "rows = open('data/in.csv').read().split()\nopen('out.txt', 'w').write(str(len(rows)))\nopen('blob.bin', 'wb').write(open('raw.bin', 'rb').read()[::-1])\nlen(rows)",
		"files": [{"name": "data/in.csv", "text": "a\nb\nc\n"}, {"name": "raw.bin", "data": "AAEC"}]}`))
	if err != nil || res.IsError {
		t.Fatalf("%v %q", err, res.Text())
	}
	if res.Text() != `{"value":3,"stdout":"","files":[{"name":"blob.bin","bytes":3},{"name":"out.txt","bytes":1}]}` {
		t.Errorf("text %s", res.Text())
	}
	if len(res.Output.Files) != 2 || string(res.Output.Files[0].Data) != "\x02\x01\x00" || string(res.Output.Files[1].Data) != "3" {
		t.Errorf("files %+v", res.Output.Files)
	}
}

// TestSession: a caller with sessions decodes with Request, runs in its
// session and maps with Answer.
func TestSession(t *testing.T) {
	tool := codemode.New(runner, &codemode.Options{Sessions: true})
	s, err := runner.NewSession(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(t.Context())
	run := func(args string) (*codemode.Result, bool) {
		req, fresh, err := tool.Request(json.RawMessage(args))
		if err != nil {
			t.Fatal(err)
		}
		if req.Timeout != tool.Timeout() {
			t.Errorf("timeout %v", req.Timeout)
		}
		out, err := s.Run(t.Context(), req)
		res, err := tool.Answer(t.Context(), out, err)
		if err != nil {
			t.Fatal(err)
		}
		return res, fresh
	}
	if res, fresh := run(`{"source": "total = lookup(key='book')"}`); res.IsError || fresh {
		t.Fatalf("%q %v", res.Text(), fresh)
	}
	if res, fresh := run(`{"source": "total * 2", "fresh": true}`); res.Text() != `{"value":42,"stdout":""}` || !fresh {
		t.Errorf("%q %v", res.Text(), fresh)
	}
}

func TestResultText(t *testing.T) {
	res := &codemode.Result{IsError: true, Error: "TimeoutError: late", Notice: "The state was lost.",
		Stdout: "a\n", Stderr: "b", StderrTruncated: true}
	if got := res.Text(); got != "The state was lost.\n\nTimeoutError: late\n\nstdout:\na\n\nstderr:\nb\n[truncated]\n" {
		t.Errorf("%q", got)
	}
	if got := codemode.Failed("busy, retry").Text(); got != "busy, retry" {
		t.Errorf("%q", got)
	}
	if got := (&codemode.Result{Notice: "new session", Value: json.RawMessage("1")}).Text(); got != `{"notice":"new session","value":1,"stdout":""}` {
		t.Errorf("%q", got)
	}
}

// FuzzRequest: the model's arguments, whatever they are, decode to a
// Request to run or to an ArgumentError, never a panic.
func FuzzRequest(f *testing.F) {
	for _, seed := range []string{``, `{}`, `{"source": "1"}`, `{"source": "1", "inputs": {"a": [1]}, "fresh": true}`,
		`{"source": "1", "files": [{"name": "a/b.csv", "text": "x"}, {"name": "c", "data": "AAE="}]}`, `{"source": "1", "files": [{"name": ""}]}`,
		`{"source": "1", "inputs": null}`, `null`, `"x"`, `{"source": "1"}{`, `{"source": "\u0000"}`} {
		f.Add([]byte(seed))
	}
	tool := codemode.New(runner, &codemode.Options{Sessions: true})
	f.Fuzz(func(t *testing.T, data []byte) {
		req, _, err := tool.Request(data)
		var argErr *codemode.ArgumentError
		switch {
		case err != nil && !errors.As(err, &argErr):
			t.Fatalf("%q: an error of type %T: %v", data, err, err)
		case err != nil && !strings.HasPrefix(err.Error(), "bad arguments: "):
			t.Fatalf("%q: %v", data, err)
		case err == nil && (req.Source == "" || req.Timeout != tool.Timeout()):
			t.Fatalf("%q: %+v", data, req)
		case err == nil && runner.CheckFiles(req.Files) != nil:
			t.Fatalf("%q: files %v", data, runner.CheckFiles(req.Files))
		}
	})
}

// TestDescriptionIndex: past StubLimit the description lists the tools as an
// index, names and first lines, and tells how a program reads the rest; the
// sizes of the repository's captured MCP servers', all at once, are logged
// (docs/mcp.md).
func TestDescriptionIndex(t *testing.T) {
	all := spine.Manifest{}
	for _, name := range spinetest.MCPServers {
		m := spinetest.ServerManifest(t, "../testdata/mcp-servers", name, func(context.Context, json.RawMessage) (any, error) { return nil, nil })
		t.Logf("%s, %d tools: %d bytes with every stub, %d as an index", name, len(m),
			len(codemode.Description(m, &codemode.Options{StubLimit: -1})), len(codemode.Description(m, &codemode.Options{StubLimit: 1})))
		for tool, spec := range m {
			all[tool] = spec
		}
	}
	full := codemode.Description(all, &codemode.Options{StubLimit: -1})
	index := codemode.Description(all, &codemode.Options{StubLimit: 1})
	t.Logf("%d tools: %d bytes with every stub, %d as an index", len(all), len(full), len(index))
	if !strings.Contains(full, "def read_text_file(") || strings.Contains(full, "tools.describe") {
		t.Error("the full description lacks a stub, or speaks of the index")
	}
	if !strings.Contains(index, "print(tools.describe(\"name\"))") || strings.Contains(index, "def read_text_file(") ||
		!strings.Contains(index, "- filesystem.read_text_file: ") || len(index) >= len(full) {
		t.Errorf("the index description:\n%s", index)
	}
	if got := codemode.Description(all, nil); (len(spine.Stubs(all)) > codemode.DefaultStubLimit) != (got == index) {
		t.Errorf("by default: %d bytes of stubs, an index %v", len(spine.Stubs(all)), got == index)
	}
}
