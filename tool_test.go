package spine_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/internal/spinetest"
)

type toolEdit struct {
	OldText string `json:"oldText" jsonschema:"text to find"`
	NewText string `json:"newText"`
}

type toolEditIn struct {
	Path   string     `json:"path"`
	Edits  []toolEdit `json:"edits"`
	DryRun bool       `json:"dryRun,omitempty"`
	Limit  *int       `json:"limit,omitempty"`
}

type toolEditOut struct {
	Content string `json:"content"`
	Changed int    `json:"changed"`
}

func editTool(calls *atomic.Int64) spine.ToolSpec {
	return spine.NewTool("Edit a file.", func(ctx context.Context, in toolEditIn) (toolEditOut, error) {
		calls.Add(1)
		return toolEditOut{Content: in.Path, Changed: len(in.Edits)}, nil
	})
}

func TestNewToolSchemas(t *testing.T) {
	var calls atomic.Int64
	spec := editTool(&calls)
	wantIn := `{"type":"object","properties":{"path":{"type":"string"},"edits":{"type":["null","array"],"items":{"type":"object","properties":{"oldText":{"type":"string","description":"text to find"},"newText":{"type":"string"}},"title":"toolEdit","required":["oldText","newText"],"additionalProperties":false}},"dryRun":{"type":"boolean"},"limit":{"type":["null","integer"]}},"required":["path","edits"],"additionalProperties":false}`
	if string(spec.InputSchema) != wantIn {
		t.Errorf("InputSchema\n%s\nwant\n%s", spec.InputSchema, wantIn)
	}
	wantOut := `{"type":"object","properties":{"content":{"type":"string"},"changed":{"type":"integer"}},"title":"toolEditOut","required":["content","changed"],"additionalProperties":false}`
	if string(spec.OutputSchema) != wantOut {
		t.Errorf("OutputSchema\n%s\nwant\n%s", spec.OutputSchema, wantOut)
	}
	// Go's struct types keep their names.
	wantStub := "class ToolEdit(TypedDict):\n    oldText: str  # text to find\n    newText: str\n\nclass ToolEditOut(TypedDict):\n    content: str\n    changed: int\n\n" +
		"def edit(path: str, edits: list[ToolEdit] | None, dryRun: bool | None = None, limit: int | None = None) -> ToolEditOut:\n    \"\"\"Edit a file.\"\"\"\n"
	if got := spine.Stub("edit", spec); got != wantStub {
		t.Errorf("stub\n%s\nwant\n%s", got, wantStub)
	}

	// A map takes any keywords; a value of type any has no schema.
	open := spine.NewTool("", func(ctx context.Context, in map[string]int) (any, error) { return len(in), nil })
	if got := spine.Stub("f", open); got != "def f(**kwargs: int) -> Any:\n    ...\n" {
		t.Errorf("map stub %q", got)
	}
	if open.OutputSchema != nil {
		t.Errorf("OutputSchema of any: %s", open.OutputSchema)
	}
	// A pointer to a struct is a struct.
	ptr := spine.NewTool("", func(ctx context.Context, in *toolEdit) (string, error) { return in.OldText, nil })
	if got := spine.Stub("f", ptr); got != "def f(oldText: str, newText: str) -> str:\n    \"\"\"Args:\n        oldText: text to find\n    \"\"\"\n" {
		t.Errorf("pointer stub %q", got)
	}
}

func TestNewToolPanicsOnBadTypes(t *testing.T) {
	for name, make := range map[string]func(){
		"scalar arguments": func() { spine.NewTool("", func(ctx context.Context, in int) (int, error) { return in, nil }) },
		"int-keyed map":    func() { spine.NewTool("", func(ctx context.Context, in map[int]string) (int, error) { return 0, nil }) },
		"channel field": func() {
			spine.NewTool("", func(ctx context.Context, in struct{ C chan int }) (int, error) { return 0, nil })
		},
		"func value":   func() { spine.NewTool("", func(ctx context.Context, in struct{}) (func(), error) { return nil, nil }) },
		"nil function": func() { spine.NewTool[struct{}, int]("", nil) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if p := recover(); p == nil || !strings.HasPrefix(p.(string), "spine.NewTool: ") {
					t.Errorf("panic %v, want spine.NewTool's", p)
				}
			}()
			make()
		})
	}
}

func TestNewToolArguments(t *testing.T) {
	var calls atomic.Int64
	spec := editTool(&calls)
	for _, c := range []struct{ args, want string }{
		{`{"path":"a","edits":[{"oldText":"x","newText":"y"}]}`, ``},
		{`{"path":"a","edits":null,"limit":null}`, ``},
		{`{"path":7,"edits":[]}`, `argument 'path' must be str, not int`},
		{`{"path":"a","edits":"x"}`, `argument 'edits' must be list or None, not str`},
		{`{"path":"a","edits":[],"dryRun":"yes"}`, `argument 'dryRun' must be bool, not str`},
		{`{"path":"a","edits":[],"limit":1.5}`, `argument 'limit' must be int or None, not float`},
		{`{"path":"a","edits":[{"oldText":1,"newText":"y"}]}`, `argument 'edits[0].oldText' must be str, not int`},
		{`{"path":"a","edits":[],"kee":1}`, `got an unexpected keyword argument 'kee'`},
		{`{"path":"a","edits":[{"oldText":"x","newText":"y"},{"oldText":"x","newText":"y","extra":1}]}`, `argument 'edits[1]' has an unexpected key 'extra'`},
		{`{"path":null,"edits":[]}`, `argument 'path' must be str, not None`},
		{`{"edits":[]}`, `missing 1 required keyword-only argument: 'path'`},
		{`{"path":"a","edits":[{"oldText":"x"}]}`, `argument 'edits[0]' is missing the key 'newText'`},
		{`[1]`, `arguments must be a dict, not list`},
	} {
		value, err := spec.Call(context.Background(), json.RawMessage(c.args))
		var argErr *spine.ArgumentError
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.args, err)
		case c.want == "" && value == nil:
			t.Errorf("%s: no value", c.args)
		case c.want != "" && !errors.As(err, &argErr):
			t.Errorf("%s: error %v, want an *ArgumentError", c.args, err)
		case c.want != "" && !strings.HasPrefix(argErr.Message, c.want):
			t.Errorf("%s: %q, want %q", c.args, argErr.Message, c.want)
		}
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("the function was called %d times, want 2 (only for the good arguments)", n)
	}
}

// TestTypedToolInGuest calls a typed tool from a program in the real Guest
// with good and bad arguments: the bad ones are TypeError at the call site,
// with the tool's name, and the function is not called for them.
func TestTypedToolInGuest(t *testing.T) {
	var calls atomic.Int64
	r := spinetest.NewRunner(t, spine.Manifest{"files.edit": editTool(&calls)}, &spine.Options{PoolSize: -1})
	out := spinetest.MustRun(t, r, spine.Request{Source: `
ok = files.edit(path="a.txt", edits=[{"oldText": "x", "newText": "y"}])
errors = []
for bad in (
    {"path": 7, "edits": []},
    {"path": "a", "edits": [{"oldText": "x", "newText": 2}]},
    {"path": "a", "edits": [], "dryRun": "no"},
):
    try:
        files.edit(**bad)
    except TypeError as e:
        errors.append(str(e))
try:
    files.edit(path="a", edits=[{"oldText": "x"}])
except TypeError as e:
    errors.append(str(e))
result = {"ok": ok, "errors": errors}
`})
	want := `{"ok":{"content":"a.txt","changed":1},"errors":["files.edit() argument 'path' must be str, not int","files.edit() argument 'edits[0].newText' must be str, not int","files.edit() argument 'dryRun' must be bool, not str","files.edit() argument 'edits[0]' is missing the key 'newText'"]}`
	if string(out.Value) != want {
		t.Errorf("value\n%s\nwant\n%s", out.Value, want)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("the function was called %d times, want 1", n)
	}
	// Uncaught, it is the run's TypeError, at the program's line.
	_, err := r.Run(context.Background(), spine.Request{Source: "x = 1\nfiles.edit(path=1, edits=[])\n"})
	var pyErr *spine.PythonError
	if !errors.As(err, &pyErr) || pyErr.Type != "TypeError" || pyErr.Line != 2 || pyErr.Message != "files.edit() argument 'path' must be str, not int" {
		t.Errorf("err = %#v", err)
	}
}

// TestToolKeywordChecks: a tool's proxy checks the keywords of a call against
// its input schema before any request, in CPython's words, with early reads
// on and off alike; the tool is never reached, not even by an early read.
func TestToolKeywordChecks(t *testing.T) {
	var calls atomic.Int64
	count := func(ctx context.Context, args json.RawMessage) (any, error) {
		calls.Add(1)
		return string(args), nil
	}
	m := spine.Manifest{
		"lookup": {Call: count, AllowEarlyRead: true,
			InputSchema: json.RawMessage(`{"type":"object","properties":{"key":{"type":"string"}},"required":["key"]}`)},
		"market.quote": {Call: count, AllowEarlyRead: true,
			InputSchema: json.RawMessage(`{"type":"object","properties":{"a":{},"b":{},"c":{},"d":{}},"required":["a","b","c"]}`)},
		"anykey": {Call: count, AllowEarlyRead: true,
			InputSchema: json.RawMessage(`{"type":"object","properties":{"key":{"type":"string"}},"required":["key"],"additionalProperties":true}`)},
		"free": {Call: count, AllowEarlyRead: true},
	}
	r := spinetest.NewRunner(t, m, &spine.Options{PoolSize: -1})
	for _, c := range []struct{ source, want string }{
		{`lookup(kee="book")`, "lookup() got an unexpected keyword argument 'kee'"},
		{`lookup()`, "lookup() missing 1 required positional argument: 'key'"},
		{`lookup(key="a", kee="b")`, "lookup() got an unexpected keyword argument 'kee'"},
		{`market.quote(a=1)`, "market.quote() missing 2 required positional arguments: 'b' and 'c'"},
		{`market.quote(d=1)`, "market.quote() missing 3 required positional arguments: 'a', 'b', and 'c'"},
		{`market.quote(a=1, b=2, c=3, e=4)`, "market.quote() got an unexpected keyword argument 'e'"},
		{`[lookup(kee=k) for k in inputs["keys"]]`, "lookup() got an unexpected keyword argument 'kee'"},
		{`anykey(kee="x")`, "anykey() missing 1 required positional argument: 'key'"},
		{"import concurrent.futures as cf\nwith cf.ThreadPoolExecutor() as ex:\n    ex.submit(lookup, kee=\"x\").result()",
			"lookup() got an unexpected keyword argument 'kee'"},
	} {
		// Without early reads, with them (the PLM pass), and streamed in
		// (prefix mode).
		for _, mode := range []string{"off", "on", "stream"} {
			calls.Store(0)
			request := spine.Request{Source: c.source, EarlyReads: mode != "off", Inputs: map[string]any{"keys": []string{"a", "b"}}}
			if mode == "stream" {
				request.Source, request.Stream = "", strings.NewReader(c.source)
			}
			_, err := r.Run(context.Background(), request)
			var pyErr *spine.PythonError
			if !errors.As(err, &pyErr) || pyErr.Type != "TypeError" || pyErr.Message != c.want {
				t.Errorf("%s (early reads %s): %v, want TypeError: %s", c.source, mode, err, c.want)
			}
			if n := calls.Load(); n != 0 {
				t.Errorf("%s (early reads %s): the tool was called %d times", c.source, mode, n)
			}
		}
	}
	// What the schema allows goes through, to the tool, either way.
	for _, early := range []bool{false, true} {
		out, err := r.Run(context.Background(), spine.Request{EarlyReads: early, Source: `
[lookup(key="book"), market.quote(a=1, b=2, c=3), market.quote(a=1, b=2, c=3, d=4),
 anykey(key="k", anything=1, more=[2]), free(x=1, y=2), free()]`})
		if err != nil {
			t.Fatal(err)
		}
		want := `["{\"key\":\"book\"}","{\"a\":1,\"b\":2,\"c\":3}","{\"a\":1,\"b\":2,\"c\":3,\"d\":4}","{\"key\":\"k\",\"anything\":1,\"more\":[2]}","{\"x\":1,\"y\":2}","{}"]`
		if string(out.Value) != want {
			t.Errorf("early reads %v: %s, want %s", early, out.Value, want)
		}
	}
}

// FuzzNewToolArguments: whatever a program sends, a typed tool's decoding
// answers with a value or an *ArgumentError, and never panics.
func FuzzNewToolArguments(f *testing.F) {
	for _, seed := range []string{`{}`, `{"path":"a","edits":[{"oldText":"x","newText":"y"}]}`, `{"path":7}`, `[1]`, `null`, `{"edits":[{"a":1}]}`, `{"limit":1e400}`, `"x"`} {
		f.Add([]byte(seed))
	}
	var calls atomic.Int64
	spec := editTool(&calls)
	f.Fuzz(func(t *testing.T, args []byte) {
		if !json.Valid(args) {
			return // the Guest only sends JSON
		}
		_, err := spec.Call(context.Background(), args)
		var argErr *spine.ArgumentError
		if err != nil && !errors.As(err, &argErr) {
			t.Fatalf("%s: %v is not an *ArgumentError", args, err)
		}
	})
}
