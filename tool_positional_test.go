package spine_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/internal/spinetest"
)

// recordingTool is a tool that answers with the arguments it got, and
// keeps them.
type recordingTool struct {
	mu   sync.Mutex
	args []string
}

func (r *recordingTool) call(ctx context.Context, args json.RawMessage) (any, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.args = append(r.args, string(args))
	return string(args), nil
}

func (r *recordingTool) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	got := r.args
	r.args = nil
	return got
}

type positionalIn struct {
	Key      string `json:"key"`
	Quantity int    `json:"quantity,omitempty"`
	Status   string `json:"status,omitempty"`
}

func positionalManifest(rec *recordingTool) spine.Manifest {
	return spine.Manifest{
		"lookup": {Call: rec.call, AllowEarlyRead: true, Description: "Look up the price of an item by key.",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"key":{"type":"string"}},"required":["key"]}`)},
		// Optional first in the schema: the signature puts the required one first.
		"nav.goto": {Call: rec.call, AllowEarlyRead: true,
			InputSchema: json.RawMessage(`{"type":"object","properties":{"speed":{"type":"integer"},"location":{"type":"string"},"note":{"type":["string","null"]}},"required":["location"]}`)},
		"price": spine.NewTool("The price of quantity items.", func(ctx context.Context, in positionalIn) (string, error) {
			b, _ := json.Marshal(in)
			rec.call(ctx, b)
			return string(b), nil
		}),
		"unordered": {Call: rec.call, KeywordOnly: true,
			InputSchema: json.RawMessage(`{"type":"object","properties":{"key":{"type":"string"}},"required":["key"]}`)},
		"free": {Call: rec.call},
	}
}

// TestToolPositionalCalls: a tool's arguments may be passed positionally, in
// the order of its stub's signature, by keyword, or both; the Host gets the
// same keyword JSON either way, with early reads off, on and streamed.
func TestToolPositionalCalls(t *testing.T) {
	rec := &recordingTool{}
	r := spinetest.NewRunner(t, positionalManifest(rec), &spine.Options{PoolSize: -1})
	for _, c := range []struct {
		source string
		want   []string // the arguments the tools got
	}{
		{`lookup("book")`, []string{`{"key":"book"}`}},
		{`lookup(key="book")`, []string{`{"key":"book"}`}},
		{`nav.goto("kitchen", 3)`, []string{`{"location":"kitchen","speed":3}`}},
		{`nav.goto("kitchen", speed=3)`, []string{`{"location":"kitchen","speed":3}`}},
		{`nav.goto(location="kitchen", speed=3)`, []string{`{"location":"kitchen","speed":3}`}},
		{`price("pen", 2)`, []string{`{"key":"pen","quantity":2}`}},
		{`price("pen", quantity=2, status="new")`, []string{`{"key":"pen","quantity":2,"status":"new"}`}},
		{`unordered(key="x")`, []string{`{"key":"x"}`}},
	} {
		for _, mode := range []string{"off", "on", "stream"} {
			request := spine.Request{Source: c.source, EarlyReads: mode != "off"}
			if mode == "stream" {
				request.Source, request.Stream = "", strings.NewReader(c.source)
			}
			if _, err := r.Run(context.Background(), request); err != nil {
				t.Fatalf("%s (early reads %s): %v", c.source, mode, err)
			}
			if got := rec.take(); strings.Join(got, " ") != strings.Join(c.want, " ") {
				t.Errorf("%s (early reads %s): the tool got %q, want %q", c.source, mode, got, c.want)
			}
		}
	}
}

// TestToolPositionalErrors: a call its tool's parameters do not take raises
// TypeError in CPython's words (what a def with the stub's signature would
// raise), before any request; a tool without a known order is keyword-only
// and says why.
func TestToolPositionalErrors(t *testing.T) {
	rec := &recordingTool{}
	r := spinetest.NewRunner(t, positionalManifest(rec), &spine.Options{PoolSize: -1})
	for _, c := range []struct{ source, want string }{
		{`lookup("book", "pen")`, "lookup() takes 1 positional argument but 2 were given"},
		{`lookup("book", key="pen")`, "lookup() got multiple values for argument 'key'"},
		{`lookup()`, "lookup() missing 1 required positional argument: 'key'"},
		{`lookup("book", kee=1)`, "lookup() got an unexpected keyword argument 'kee'"},
		{`nav.goto("a", 1, None, 4)`, "nav.goto() takes from 1 to 3 positional arguments but 4 were given"},
		{`nav.goto(speed=1)`, "nav.goto() missing 1 required positional argument: 'location'"},
		{`price("pen", 1, "x", 2)`, "price() takes from 1 to 3 positional arguments but 4 were given"},
		{`unordered("x")`, "unordered() takes keyword arguments only, as the order of its parameters is not known (1 positional argument given)"},
		{`free(1, 2)`, "free() takes keyword arguments only, as it has no input schema to give its parameters an order (2 positional arguments given)"},
	} {
		for _, early := range []bool{false, true} {
			_, err := r.Run(context.Background(), spine.Request{Source: c.source, EarlyReads: early})
			var pyErr *spine.PythonError
			if !errors.As(err, &pyErr) || pyErr.Type != "TypeError" || pyErr.Message != c.want {
				t.Errorf("%s (early reads %v): %v, want TypeError: %s", c.source, early, err, c.want)
			}
			if got := rec.take(); len(got) != 0 {
				t.Errorf("%s (early reads %v): the tool was called with %q", c.source, early, got)
			}
		}
	}
	// The CPython wording is CPython's: the same calls of a def with the
	// stub's signature raise the same.
	out, err := r.Run(context.Background(), spine.Request{Source: `
def lookup(key): pass
def goto(location, speed=None, note=None): pass
said = []
for call in ['lookup("book", "pen")', 'lookup("book", key="pen")', 'lookup()', 'goto("a", 1, None, 4)']:
    try:
        eval(call)
    except TypeError as e:
        said.append(str(e))
said`})
	if err != nil {
		t.Fatal(err)
	}
	want := `["lookup() takes 1 positional argument but 2 were given","lookup() got multiple values for argument 'key'","lookup() missing 1 required positional argument: 'key'","goto() takes from 1 to 3 positional arguments but 4 were given"]`
	if string(out.Value) != want {
		t.Errorf("CPython says %s, want %s", out.Value, want)
	}
}

// TestToolPositionalEarlyRead: the PLM pass and prefix mode name positional
// arguments as the proxy does, so a positional call is answered by an early
// read just as its keyword form is.
func TestToolPositionalEarlyRead(t *testing.T) {
	rec := &recordingTool{}
	r := spinetest.NewRunner(t, positionalManifest(rec), &spine.Options{PoolSize: -1})
	for _, source := range []string{
		"a = lookup(\"book\")\nb = lookup(\"pen\")\n[a, b]",
		"a = lookup(key=\"book\")\nb = lookup(key=\"pen\")\n[a, b]",
		"a = lookup(\"book\")\nb = lookup(key=\"pen\")\n[a, b]",
		"a = lookup(key=\"book\")\nb = lookup(\"pen\")\n[a, b]",
	} {
		for _, stream := range []bool{false, true} {
			request := spine.Request{Source: source, EarlyReads: true}
			if stream {
				request.Source, request.Stream = "", strings.NewReader(source)
			}
			out, err := r.Run(context.Background(), request)
			if err != nil {
				t.Fatalf("%s: %v", source, err)
			}
			if string(out.Value) != `["{\"key\":\"book\"}","{\"key\":\"pen\"}"]` {
				t.Errorf("%s: value %s", source, out.Value)
			}
			if len(out.Calls) != 2 || !out.Calls[1].Early {
				t.Errorf("%s (streamed %v): calls %+v, want the second answered early", source, stream, out.Calls)
			}
			rec.take()
		}
	}
}

// TestToolNoneIsNotGiven: None for an optional parameter whose schema
// refuses null means "not given" for every kind of tool: the request has no
// such key. One whose schema takes null passes it on.
func TestToolNoneIsNotGiven(t *testing.T) {
	rec := &recordingTool{}
	m := positionalManifest(rec)
	checked, err := spine.ValidateArguments(spine.ToolSpec{Call: rec.call,
		InputSchema: json.RawMessage(`{"type":"object","properties":{"query":{"type":"string"},"status":{"type":"string"},"limit":{"type":"integer","default":10}},"required":["query"]}`)})
	if err != nil {
		t.Fatal(err)
	}
	m["search"] = checked
	r := spinetest.NewRunner(t, m, &spine.Options{PoolSize: -1})
	for _, c := range []struct {
		source string
		want   string
	}{
		{`price("pen", status=None)`, `{"key":"pen"}`},
		{`price("pen", None, None)`, `{"key":"pen"}`},
		{`search("q", status=None, limit=None)`, `{"query":"q"}`},
		{`search(query="q", status=None)`, `{"query":"q"}`},
		{`nav.goto("home", None, None)`, `{"location":"home","note":null}`},
	} {
		for _, early := range []bool{false, true} {
			if _, err := r.Run(context.Background(), spine.Request{Source: c.source, EarlyReads: early}); err != nil {
				t.Fatalf("%s: %v", c.source, err)
			}
			if got := rec.take(); len(got) != 1 || got[0] != c.want {
				t.Errorf("%s (early reads %v): the tool got %q, want %s", c.source, early, got, c.want)
			}
		}
	}
	// None for a required parameter is a value, and a wrong one.
	_, err = r.Run(context.Background(), spine.Request{Source: `search(None)`})
	var pyErr *spine.PythonError
	if !errors.As(err, &pyErr) || pyErr.Type != "TypeError" || pyErr.Message != "search() argument 'query' must be str, not None" {
		t.Errorf("search(None): %v", err)
	}
}

// TestToolArgumentErrorsAlike: the same mistake raises the same TypeError,
// naming the argument, for a typed Go tool and for a spec checked with
// ValidateArguments (as mcpclient's tools are); Go's decoder's words never
// reach the program.
func TestToolArgumentErrorsAlike(t *testing.T) {
	type item struct {
		Name string `json:"name"`
	}
	type searchIn struct {
		Query string `json:"query"`
		Limit int    `json:"limit,omitempty" jsonschema:"at most this many"`
		Items []item `json:"items,omitempty"`
	}
	typed := spine.NewTool("", func(ctx context.Context, in searchIn) (int, error) { return in.Limit, nil })
	handWritten := func(ctx context.Context, args json.RawMessage) (any, error) {
		var in searchIn
		if err := json.Unmarshal(args, &in); err != nil {
			return nil, err
		}
		return in.Limit, nil
	}
	checked, err := spine.ValidateArguments(spine.ToolSpec{Call: handWritten, InputSchema: typed.InputSchema})
	if err != nil {
		t.Fatal(err)
	}
	r := spinetest.NewRunner(t, spine.Manifest{"typed.search": typed, "checked.search": checked}, &spine.Options{PoolSize: -1})
	for _, c := range []struct{ call, want string }{
		{`search("q", "5")`, "search() argument 'limit' must be int, not str"},
		{`search("q", items=[{"name": 1}])`, "search() argument 'items[0].name' must be str, not int"},
		{`search("q", items=[{"nam": "x"}])`, "search() argument 'items[0]' has an unexpected key 'nam'"},
		{`search(7)`, "search() argument 'query' must be str, not int"},
	} {
		for _, space := range []string{"typed", "checked"} {
			call := space + "." + c.call
			want := space + "." + c.want
			_, err := r.Run(context.Background(), spine.Request{Source: call})
			var pyErr *spine.PythonError
			if !errors.As(err, &pyErr) || pyErr.Type != "TypeError" || pyErr.Message != want {
				t.Errorf("%s: %v, want TypeError: %s", call, err, want)
			}
		}
	}
}

// TestToolMissingFromNamespace: a name a tool namespace does not hold raises
// AttributeError naming the namespace as the program wrote it and listing
// its tools.
func TestToolMissingFromNamespace(t *testing.T) {
	call := func(ctx context.Context, args json.RawMessage) (any, error) { return nil, nil }
	r := spinetest.NewRunner(t, spine.Manifest{"fs.read_file": {Call: call}, "fs.list_dir": {Call: call}, "fs.sub.x": {Call: call}}, &spine.Options{PoolSize: -1})
	_, err := r.Run(context.Background(), spine.Request{Source: "fs.edit_file(path='a')"})
	var pyErr *spine.PythonError
	want := "module 'fs' has no tool 'edit_file'; its tools are: list_dir, read_file, sub"
	if !errors.As(err, &pyErr) || pyErr.Type != "AttributeError" || pyErr.Message != want {
		t.Errorf("%v, want AttributeError: %s", err, want)
	}
	out, err := r.Run(context.Background(), spine.Request{Source: "[hasattr(fs, 'edit_file'), hasattr(fs, 'read_file'), getattr(fs.sub, 'y', 'none')]"})
	if err != nil || string(out.Value) != `[false,true,"none"]` {
		t.Errorf("hasattr/getattr: %v %v", out, err)
	}
}

// TestGuestHelpShowsOwnDoc: help(tool) shows the tool's signature and its
// own documentation, not the stub text of the types it uses.
func TestGuestHelpShowsOwnDoc(t *testing.T) {
	type Order struct {
		ID    string  `json:"id"`
		Total float64 `json:"total"`
	}
	type searchIn struct {
		Query string `json:"query" jsonschema:"what to find"`
		Limit int    `json:"limit,omitempty"`
	}
	m := spine.Manifest{"crm.search": spine.NewTool("Search the orders.", func(ctx context.Context, in searchIn) ([]Order, error) { return nil, nil })}
	if stub := spine.Stub("crm.search", m["crm.search"]); !strings.Contains(stub, "class Order(TypedDict):") ||
		!strings.Contains(stub, "def search(query: str, limit: int | None = None) -> list[Order]:") {
		t.Errorf("stub:\n%s", stub)
	}
	r := spinetest.NewRunner(t, m, &spine.Options{PoolSize: -1})
	out, err := r.Run(context.Background(), spine.Request{Source: "help(crm.search)\nimport inspect\n[str(inspect.signature(crm.search)), crm.search.__doc__, crm.search('x')]"})
	if err != nil {
		t.Fatal(err)
	}
	want := "Help on function search:\n\nsearch(query: str, limit: int | None = None) -> list[Order]\n    Search the orders.\n    \n    Args:\n        query: what to find\n\n"
	if out.Stdout != want {
		t.Errorf("help printed\n%q\nwant\n%q", out.Stdout, want)
	}
	if string(out.Value) != `["(query: str, limit: int | None = None) -> list[Order]","Search the orders.\n\nArgs:\n    query: what to find\n",[]]` {
		t.Errorf("value %s", out.Value)
	}
}

// TestToolPositionalExecutor: a tool handed to an executor with positional
// arguments, itself or through a function that forwards them, starts on the
// Host at once as its keyword form does.
func TestToolPositionalExecutor(t *testing.T) {
	rec := &recordingTool{}
	r := spinetest.NewRunner(t, positionalManifest(rec), &spine.Options{PoolSize: -1})
	for _, args := range [][2]string{{`"book"`, `k`}, {`key="book"`, `key=k`}} {
		source := `import concurrent.futures as cf
with cf.ThreadPoolExecutor() as ex:
    a = ex.submit(lookup, ` + args[0] + `)
    b = list(ex.map(lambda k: lookup(` + args[1] + `), ["pen"]))
[a.result(), b]`
		out, err := r.Run(context.Background(), spine.Request{Source: source, EarlyReads: true})
		if err != nil {
			t.Fatalf("%s: %v", source, err)
		}
		if string(out.Value) != `["{\"key\":\"book\"}",["{\"key\":\"pen\"}"]]` {
			t.Errorf("%s: value %s", source, out.Value)
		}
		if len(out.Calls) != 2 || !out.Calls[0].Early || !out.Calls[1].Early {
			t.Errorf("%s: calls %+v, want both started on the Host", source, out.Calls)
		}
		rec.take()
	}
}
