package spine_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/internal/spinetest"
)

func TestStub(t *testing.T) {
	for _, c := range []struct {
		name, description, schema, want string
	}{
		{"no schema", "Do it.", ``,
			"def f(**kwargs) -> Any:\n    \"\"\"Do it.\"\"\"\n"},
		{"no description", "", `{"type":"object","properties":{"x":{"type":"integer"}},"required":["x"]}`,
			"def f(x: int) -> Any:\n    ...\n"},
		{"no parameters", "Now.", `{"type":"object"}`,
			"def f() -> Any:\n    \"\"\"Now.\"\"\"\n"},
		{"scalars, required first, schema order kept", "", `{"type":"object","properties":{
			"z":{"type":"string"},"n":{"type":"number"},"b":{"type":"boolean"},"i":{"type":"integer"},"nul":{"type":"null"}},
			"required":["i","b"]}`,
			"def f(b: bool, i: int, z: str | None = None, n: float | None = None, nul: None = None) -> Any:\n    ...\n"},
		{"defaults", "", `{"type":"object","properties":{
			"s":{"type":"string","default":"a \"b\"\n"},"t":{"type":"boolean","default":true},"u":{"type":["integer","null"],"default":null},
			"l":{"type":"array","default":[1,"x",false]},"o":{"type":"object","default":{"k":null}},"f":{"type":"number","default":1.5e3}}}`,
			`def f(s: str = "a \"b\"\n", t: bool = True, u: int | None = None, l: list[Any] = [1, "x", False], o: dict[str, Any] = {"k": None}, f: float = 1.5e3) -> Any:` + "\n    ...\n"},
		{"containers", "", `{"type":"object","properties":{
			"tags":{"type":"array","items":{"type":"string"}},
			"grid":{"type":"array","items":{"type":"array","items":{"type":"number"}}},
			"meta":{"type":"object","additionalProperties":{"type":"integer"}},
			"point":{"type":"object","properties":{"x":{"type":"number"}}}},
			"required":["tags","grid","meta","point"]}`,
			"class Point(TypedDict, total=False):\n    x: float\n\ndef f(tags: list[str], grid: list[list[float]], meta: dict[str, int], point: Point) -> Any:\n    ...\n"},
		{"enums and const", "", `{"type":"object","properties":{
			"state":{"type":"string","enum":["open","closed"]},
			"level":{"enum":[1,2,null]},
			"kind":{"const":"issue"}},
			"required":["state","level","kind"]}`,
			`def f(state: Literal["open", "closed"], level: Literal[1, 2] | None, kind: Literal["issue"]) -> Any:` + "\n    ...\n"},
		{"unions", "", `{"type":"object","properties":{
			"a":{"type":["string","integer"]},
			"b":{"anyOf":[{"type":"string"},{"type":"null"}]},
			"c":{"oneOf":[{"type":"integer"},{"type":"array","items":{"type":"integer"}}]},
			"d":{"type":"string","nullable":true},
			"e":{"anyOf":[{"type":"string"},{}]},
			"g":{"anyOf":[{"type":["string","null"]},{"type":"null"},{"type":"string"}]}},
			"required":["a","b","c","d","e","g"]}`,
			"def f(a: str | int, b: str | None, c: int | list[int], d: str | None, e: Any, g: str | None) -> Any:\n    ...\n"},
		{"untyped and unknown", "", `{"type":"object","properties":{"x":{},"y":{"$ref":"#/$defs/Y"},"z":{"type":"thing"}},"required":["x","y","z"]}`,
			"def f(x: Any, y: Any, z: Any) -> Any:\n    ...\n"},
		{"parameter docs", "Search issues.\n\nReturns at most limit issues.", `{"type":"object","properties":{
			"query":{"type":"string","description":"GitHub search syntax,\n  e.g. is:open"},
			"limit":{"type":"integer","default":10,"description":"how many"}},
			"required":["query"]}`,
			`def f(query: str, limit: int = 10) -> Any:
    """Search issues.

    Returns at most limit issues.

    Args:
        query: GitHub search syntax, e.g. is:open
        limit: how many
    """
`},
		{"names that are not identifiers", "Odd.", `{"type":"object","properties":{"per-page":{"type":"integer","description":"page size"},"from":{"type":"string"},"ok":{"type":"string"}},"required":["from"]}`,
			`def f(ok: str | None = None, **kwargs: Any) -> Any:
    """Odd.

    Args:
        "from" (str): pass it as **{"from": ...}
        "per-page" (int, optional): pass it as **{"per-page": ...}; page size
    """
`},
		{"open object", "", `{"type":"object","properties":{"a":{"type":"string"}},"additionalProperties":{"type":"string"}}`,
			"def f(a: str | None = None, **kwargs: str) -> Any:\n    ...\n"},
		{"docstring quotes and backslashes", `Say """hi""" \o/ "now"`, ``,
			`def f(**kwargs) -> Any:` + "\n    \"\"\"Say \\\"\\\"\\\"hi\\\"\\\"\\\" \\\\o/ \"now\\\"\"\"\"\n"},
		{"empty schema", "", `{}`, "def f(**kwargs) -> Any:\n    ...\n"},
		{"not an object", "", `{"type":"string"}`, "def f(**kwargs) -> Any:\n    ...\n"},
		{"object keys a class body cannot hold", "", `{"type":"object","properties":{"o":{"type":"object","properties":{"__x":{"type":"integer"}}}},"required":["o"]}`,
			"O = TypedDict(\"O\", {\n    \"__x\": int,\n}, total=False)\n\ndef f(o: O) -> Any:\n    ...\n"},
		{"one shape, one class", "", `{"type":"object","properties":{"a":{"type":"object","properties":{"x":{"type":"integer"}},"required":["x"]},"b":{"type":"object","properties":{"x":{"type":"integer"}},"required":["x"],"additionalProperties":false}},"required":["a","b"]}`,
			"class A(TypedDict):\n    x: int\n\ndef f(a: A, b: A) -> Any:\n    ...\n"},
		{"classes named after their properties", "", `{"type":"object","properties":{"str":{"type":"object","properties":{"x":{"type":"integer"}}},"f":{"type":"object","properties":{"y":{"type":"integer"}}}},"required":["str","f"]}`,
			"class Str(TypedDict, total=False):\n    x: int\n\nclass F(TypedDict, total=False):\n    y: int\n\ndef f(str: Str, f: F) -> Any:\n    ...\n"},
		{"properties without a type", "", `{"properties":{"a":{"type":"string"}}}`, "def f(a: str | None = None) -> Any:\n    ...\n"},
		{"bad schema", "x", `not json`,
			"def f(**kwargs) -> Any:\n    \"\"\"x\"\"\"\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := spine.Stub("f", spine.ToolSpec{Description: c.description, InputSchema: json.RawMessage(c.schema)})
			if got != c.want {
				t.Errorf("got\n%s\nwant\n%s", got, c.want)
			}
		})
	}
}

func TestStubNamespace(t *testing.T) {
	got := spine.Stub("a.b.get", spine.ToolSpec{Description: "Get."})
	want := "class a:\n    class b:\n        @staticmethod\n        def get(**kwargs) -> Any:\n            \"\"\"Get.\"\"\"\n"
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

func stubManifest() spine.Manifest {
	call := func(ctx context.Context, args json.RawMessage) (any, error) { return string(args), nil }
	return spine.Manifest{
		"lookup": {Call: call, Description: "Look up the price of an item by key.",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"key":{"type":"string","description":"the item"}},"required":["key"]}`)},
		"market.get_price": {Call: call, Description: "Return the last price of symbol.",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"symbol":{"type":"string"},"currency":{"enum":["USD","EUR"],"default":"USD"}},"required":["symbol"]}`)},
		"market.history": {Call: call, Description: "Daily closing prices,\noldest first.",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"symbol":{"type":"string"},"days":{"type":"integer","default":30}},"required":["symbol"]}`)},
		"market.fx.rate": {Call: call},
		"zeta":           {Call: call, Description: "Last."},
	}
}

// TestStubs: the stubs of stubManifest are the golden file
// testdata/stubs/market.pyi (TestGoldenStubs).
func TestStubs(t *testing.T) {
	if got := spine.Stubs(nil); got != "from __future__ import annotations\nfrom typing import Any, Literal, NotRequired, TypedDict\n" {
		t.Errorf("empty manifest: %q", got)
	}
}

// TestStubsArePython runs the stubs in the real Guest: they are valid Python,
// and each signature accepts the calls the schema allows.
func TestStubsArePython(t *testing.T) {
	m := stubManifest()
	m["odd"] = spine.ToolSpec{Call: m["zeta"].Call, Description: `quotes """ and \ and "`,
		InputSchema: json.RawMessage(`{"type":"object","properties":{"per-page":{"type":"integer"},"list":{"type":"array","items":{"type":"string"}},"opt":{"type":["string","null"]}}}`)}
	r := spinetest.NewRunner(t, m, &spine.Options{PoolSize: -1})
	const source = `
import inspect
ns = {}
exec(compile(inputs["stubs"], "stubs", "exec"), ns)
result = {
    "lookup": str(inspect.signature(ns["lookup"])),
    "get_price": str(inspect.signature(ns["market"].get_price)),
    "rate": str(inspect.signature(ns["market"].fx.rate)),
    "odd": str(inspect.signature(ns["odd"])),
    "odd_doc": ns["odd"].__doc__,
}
`
	out, err := r.Run(context.Background(), spine.Request{Source: source, Inputs: map[string]any{"stubs": spine.Stubs(m)}})
	if err != nil {
		t.Fatalf("%v\n%s", err, spine.Stubs(m))
	}
	want := `{"lookup":"(key: 'str') -> 'Any'","get_price":"(symbol: 'str', currency: \"Literal['USD', 'EUR']\" = 'USD') -> 'Any'","rate":"(**kwargs) -> 'Any'","odd":"(list: 'list[str] | None' = None, opt: 'str | None' = None, **kwargs: 'Any') -> 'Any'","odd_doc":"quotes \"\"\" and \\ and \"\n\n    Args:\n        \"per-page\" (int, optional): pass it as **{\"per-page\": ...}\n    "}`
	if string(out.Value) != want {
		t.Errorf("value\n%s\nwant\n%s", out.Value, want)
	}
}

// TestGuestHelpShowsStub: help(tool) in the Guest shows the tool's stub's
// def line as its signature and the stub's docstring as its doc, which is
// tool.__doc__.
func TestGuestHelpShowsStub(t *testing.T) {
	m := stubManifest()
	r := spinetest.NewRunner(t, m, &spine.Options{PoolSize: -1})
	out, err := r.Run(context.Background(), spine.Request{Source: "help(market.get_price)\nhelp(lookup)\nresult = lookup.__doc__"})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"get_price(symbol: str, currency: Literal['USD', 'EUR'] = 'USD') -> Any\n    Return the last price of symbol.\n",
		"lookup(key: str) -> Any\n    Look up the price of an item by key.\n    \n    Args:\n        key: the item\n",
	} {
		if !strings.Contains(out.Stdout, want) {
			t.Errorf("help printed\n%s\nwithout\n%s", out.Stdout, want)
		}
	}
	doc := "Look up the price of an item by key.\n\nArgs:\n    key: the item\n"
	if want, _ := json.Marshal(doc); string(out.Value) != string(want) {
		t.Errorf("lookup.__doc__ = %s, want %q", out.Value, doc)
	}
}

func TestStubReturns(t *testing.T) {
	for _, c := range []struct{ name, output, want string }{
		{"none", ``, "def f() -> Any:\n    ...\n"},
		{"scalar", `{"type":"string"}`, "def f() -> str:\n    ...\n"},
		{"object", `{"type":"object","properties":{"content":{"type":"string"}},"required":["content"]}`,
			"class FResult(TypedDict):\n    content: str\n\ndef f() -> FResult:\n    ...\n"},
		{"object without properties", `{"type":"object"}`, "def f() -> dict[str, Any]:\n    ...\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := spine.Stub("f", spine.ToolSpec{InputSchema: json.RawMessage(`{"type":"object"}`), OutputSchema: json.RawMessage(c.output)})
			if got != c.want {
				t.Errorf("got\n%s\nwant\n%s", got, c.want)
			}
		})
	}
}

// TestServerStubsArePython imports the stubs of the real MCP servers' tools
// (testdata/mcp-servers) in the real Guest: each is valid Python, every
// annotation of every tool and TypedDict class resolves, and each stub's
// signature is the signature of the tool's proxy.
func TestServerStubsArePython(t *testing.T) {
	all := make(spine.Manifest)
	stubs := make(map[string]string)
	tools := make(map[string][]string)
	for _, name := range mcpServers {
		m := serverManifest(t, name)
		stubs[name] = spine.Stubs(m)
		for tool, spec := range m {
			all[tool] = spec
			tools[name] = append(tools[name], tool)
		}
	}
	r := spinetest.NewRunner(t, all, &spine.Options{PoolSize: -1})
	const source = `
import ast, inspect, sys, types, typing

def resolve(root, name):
    for part in name.split("."):
        root = getattr(root, part) if not isinstance(root, dict) else root[part]
    return root

def shape(fn, written):
    out = []
    for p in inspect.signature(fn).parameters.values():
        ann = p.annotation
        ann = ast.unparse(ast.parse(ann)) if written and isinstance(ann, str) else repr(ann)
        out.append((p.name, p.kind.name, ann, repr(p.default)))
    ret = inspect.signature(fn).return_annotation
    out.append(ast.unparse(ast.parse(ret)) if written else repr(ret))
    return out

differ = []
classes = 0
for server, text in inputs["stubs"].items():
    module = types.ModuleType("stub_" + server)  # imported as a module would be
    sys.modules[module.__name__] = module
    ns = module.__dict__
    exec(compile(text, server + ".pyi", "exec"), ns)
    for value in ns.values():
        if typing.is_typeddict(value):
            typing.get_type_hints(value)
            classes += 1
    for name in inputs["tools"][server]:
        stub = resolve(ns, name)
        typing.get_type_hints(stub)
        if shape(stub, True) != shape(resolve(globals(), name), False):
            differ.append([name, shape(stub, True), shape(resolve(globals(), name), False)])
result = {"differ": differ, "classes": classes}
`
	out, err := r.Run(context.Background(), spine.Request{Source: source, Inputs: map[string]any{"stubs": stubs, "tools": tools}})
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Differ  []any `json:"differ"`
		Classes int   `json:"classes"`
	}
	if err := json.Unmarshal(out.Value, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Differ) > 0 || got.Classes == 0 {
		t.Errorf("%d TypedDict classes; signatures that differ: %v", got.Classes, got.Differ)
	}
}

// TestServerStubsShowNestedKeys: the keys models need are in the stubs.
func TestServerStubsShowNestedKeys(t *testing.T) {
	for _, c := range []struct{ server, tool string }{
		{"memory", "def create_entities(entities: list[Entity]) -> CreateEntitiesResult:"},
		{"memory", "class Entity(TypedDict):\n    name: str  # The name of the entity\n    entityType: str  # The type of the entity\n    observations: list[str]"},
		{"filesystem", "def edit_file(path: str, edits: list[Edit], dryRun: bool = False) -> EditFileResult:"},
		{"filesystem", "class Edit(TypedDict):\n    oldText: str  # Text to search for - must match exactly\n    newText: str  # Text to replace with\n"},
		{"filesystem", "class ReadTextFileResult(TypedDict):\n    content: str\n"},
	} {
		if text := spine.Stubs(serverManifest(t, c.server)); !strings.Contains(text, c.tool) {
			t.Errorf("the stubs of %s lack\n%s", c.server, c.tool)
		}
	}
}
