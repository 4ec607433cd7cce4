package spine_test

import (
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/internal/spinetest"
)

// update rewrites the golden files instead of comparing with them:
//
//	go test -run Golden -update .
var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// golden compares got with the file at path, or writes it there with
// -update. A difference fails the test with a line diff.
func golden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run Golden -update . to write it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs (-want +got; go test -run Golden -update . accepts the new text):\n%s", path, lineDiff(string(want), got))
	}
}

// lineDiff is a line diff of a and b: lines only in a start with "-", only
// in b with "+", common ones with " ". The files it compares are small.
func lineDiff(a, b string) string {
	lines := func(s string) []string {
		l := strings.SplitAfter(s, "\n")
		if l[len(l)-1] == "" {
			l = l[:len(l)-1]
		}
		return l
	}
	x, y := lines(a), lines(b)
	// lcs[i][j] is the length of a longest common subsequence of x[i:] and y[j:].
	lcs := make([][]int, len(x)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(y)+1)
	}
	for i := len(x) - 1; i >= 0; i-- {
		for j := len(y) - 1; j >= 0; j-- {
			if x[i] == y[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var out strings.Builder
	line := func(mark byte, s string) {
		out.WriteByte(mark)
		out.WriteString(strings.TrimSuffix(s, "\n"))
		if !strings.HasSuffix(s, "\n") {
			out.WriteString(" (no newline at the end)")
		}
		out.WriteByte('\n')
	}
	i, j := 0, 0
	for i < len(x) || j < len(y) {
		switch {
		case i < len(x) && j < len(y) && x[i] == y[j]:
			line(' ', x[i])
			i, j = i+1, j+1
		case i < len(x) && (j == len(y) || lcs[i+1][j] >= lcs[i][j+1]):
			line('-', x[i])
			i++
		default:
			line('+', y[j])
			j++
		}
	}
	return out.String()
}

func TestGoldenLineDiff(t *testing.T) {
	got := lineDiff("a\nb\nc\n", "a\nB\nc\nd")
	want := " a\n-b\n+B\n c\n+d (no newline at the end)\n"
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

// goldenCall is the tool of the golden manifests; its answer does not matter.
func goldenCall(ctx context.Context, args json.RawMessage) (any, error) { return 21, nil }

// stubManifests are the manifests whose Python stubs are kept in
// testdata/stubs/NAME.pyi.
var stubManifests = map[string]spine.Manifest{
	"empty": {},
	// The demo tools of spine run --demo-tools.
	"demo": {
		"lookup": {Call: goldenCall, AllowEarlyRead: true, Description: "Look up the price of an item by key.",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"key":{"type":"string","description":"the item, e.g. \"book\""}},"required":["key"]}`)},
		"prices.list": {Call: goldenCall, AllowEarlyRead: true, Description: "List every item and its price, cheapest first; at most limit items when limit is given.",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"limit":{"type":["integer","null"],"minimum":0,"description":"how many items at most"}}}`)},
	},
	// The manifest of stubs_test.go: namespaces, enums, defaults, a
	// description of two lines, a tool with neither description nor schema.
	"market": stubManifest(),
	// Namespaces two deep beside a tool of the outer one, a tool without
	// parameters, parameter docs after a description of several paragraphs.
	"namespaces": {
		"market.get_price": {Call: goldenCall, Description: "Return the last price of symbol.",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"symbol":{"type":"string"},"currency":{"enum":["USD","EUR"],"default":"USD"}},"required":["symbol"]}`)},
		"market.history": {Call: goldenCall, Description: "Daily closing prices,\noldest first.\n\nAt most a year.",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"symbol":{"type":"string","description":"the ticker"},"days":{"type":"integer","default":30,"description":"how many days,\n  counted back from today"}},"required":["symbol"]}`)},
		"market.fx.rate":  {Call: goldenCall},
		"market.fx.pairs": {Call: goldenCall, Description: "Every pair quoted.", InputSchema: json.RawMessage(`{"type":"object"}`)},
	},
	// What an MCP server's tools look like: names that are not
	// identifiers, nullable and union types, nested containers, an open
	// object, quotes in a description.
	"mcp": {
		"github.get_issue": {Call: goldenCall, Description: "Return an issue by number.",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"number":{"type":"integer","description":"the issue number"},"state":{"enum":["open","closed"]},"repo.name":{"type":["string","null"]}},"required":["number"]}`)},
		"github.search_issues": {Call: goldenCall, Description: `Search issues with GitHub's "q" syntax.`,
			InputSchema: json.RawMessage(`{"type":"object","properties":{"q":{"type":"string"},"per-page":{"type":"integer","default":30},"labels":{"type":"array","items":{"type":"string"}},"sort":{"anyOf":[{"type":"string"},{"type":"null"}]}},"required":["q"]}`)},
		"github.create_comment": {Call: goldenCall, Description: "Comment on an issue.",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"issue":{"type":"integer"},"body":{"type":"string"},"meta":{"type":"object","additionalProperties":{"type":"string"}}},"required":["issue","body"],"additionalProperties":{"type":"string"}}`)},
	},
	// Object schemas as TypedDict classes: nested, required and optional
	// keys, keys that are not identifiers, descriptions and defaults, one
	// class for one shape used twice, two shapes that want one name, output
	// schemas as return types, objects in a union.
	"typed": {
		"crm.add_contacts": {Call: goldenCall, Description: "Add contacts.",
			InputSchema:  json.RawMessage(`{"type":"object","properties":{"contacts":{"type":"array","items":{"type":"object","description":"One person.","properties":{"name":{"type":"string","description":"full name"},"email":{"type":"string"},"address":{"type":"object","properties":{"city":{"type":"string"},"zip":{"type":"string","default":"00000"}}},"tier":{"enum":["free","pro"],"default":"free"}},"required":["name"]}}},"required":["contacts"]}`),
			OutputSchema: json.RawMessage(`{"type":"object","properties":{"added":{"type":"integer"},"contacts":{"type":"array","items":{"type":"object","description":"One person.","properties":{"name":{"type":"string","description":"full name"},"email":{"type":"string"},"address":{"type":"object","properties":{"city":{"type":"string"},"zip":{"type":"string","default":"00000"}}},"tier":{"enum":["free","pro"],"default":"free"}},"required":["name"],"additionalProperties":false}}},"required":["added"]}`)},
		"crm.find": {Call: goldenCall, Description: "Find a contact or a company.",
			InputSchema:  json.RawMessage(`{"type":"object","properties":{"filter":{"type":"object","properties":{"from":{"type":"string","description":"a date"},"per-page":{"type":"integer"}},"required":["from"]}},"required":["filter"]}`),
			OutputSchema: json.RawMessage(`{"anyOf":[{"type":"object","title":"contact","properties":{"name":{"type":"string"}},"required":["name"]},{"type":"object","title":"company","properties":{"name":{"type":"string"},"employees":{"type":"integer"}},"required":["name","employees"]},{"type":"null"}]}`)},
		"geo.contacts": {Call: goldenCall, Description: "Places with a contact.",
			InputSchema:  json.RawMessage(`{"type":"object","properties":{"contacts":{"type":"array","items":{"type":"object","properties":{"lat":{"type":"number"},"lon":{"type":"number"}},"required":["lat","lon"]}}},"required":["contacts"]}`),
			OutputSchema: json.RawMessage(`{"type":"array","items":{"type":"string"}}`)},
	},
}

func TestGoldenStubs(t *testing.T) {
	for name, m := range stubManifests {
		t.Run(name, func(t *testing.T) {
			golden(t, filepath.Join("testdata", "stubs", name+".pyi"), spine.Stubs(m))
		})
	}
}

// TestGoldenTransformed keeps the early-read pass's rewrite of each program
// testdata/early-reads/NAME.py in NAME.out.py. The programs run with the
// tools lookup and prices.list (early reads allowed) and save (not), and the
// inputs {"quantity": 3, "keys": ["book", "pen"]}; each must run without
// error.
func TestGoldenTransformed(t *testing.T) {
	sources, err := filepath.Glob(filepath.Join("testdata", "early-reads", "*.py"))
	if err != nil {
		t.Fatal(err)
	}
	var programs []string
	for _, path := range sources {
		if !strings.HasSuffix(path, ".out.py") {
			programs = append(programs, path)
		}
	}
	if len(programs) == 0 {
		t.Fatal("no programs in testdata/early-reads")
	}
	ctx := context.Background()
	r, err := spine.New(ctx, spine.Manifest{
		"lookup":      {Call: goldenCall, AllowEarlyRead: true},
		"prices.list": {Call: func(context.Context, json.RawMessage) (any, error) { return []string{"pen", "book"}, nil }, AllowEarlyRead: true},
		"save":        {Call: goldenCall},
	}, &spine.Options{PoolSize: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	for _, path := range programs {
		name := strings.TrimSuffix(filepath.Base(path), ".py")
		t.Run(name, func(t *testing.T) {
			source, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			out, err := r.Run(ctx, spine.Request{
				Source:      string(source),
				Inputs:      map[string]any{"quantity": 3, "keys": []string{"book", "pen"}},
				Filename:    filepath.Base(path),
				EarlyReads:  true,
				Transformed: true,
			})
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			if out.Transformed == "" {
				t.Fatalf("%s: no transformed program", path)
			}
			// Kept with a final newline, as editors save it.
			golden(t, strings.TrimSuffix(path, ".py")+".out.py", strings.TrimSuffix(out.Transformed, "\n")+"\n")
		})
	}
}

// serverManifest is spinetest.ServerManifest of testdata/mcp-servers.
func serverManifest(t *testing.T, name string) spine.Manifest {
	t.Helper()
	return spinetest.ServerManifest(t, filepath.Join("testdata", "mcp-servers"), name, goldenCall)
}

// mcpServers are the servers whose tool lists testdata/mcp-servers holds.
var mcpServers = spinetest.MCPServers

// TestGoldenServerStubs keeps the stubs of real MCP servers' tools in
// testdata/stubs/server-NAME.pyi.
func TestGoldenServerStubs(t *testing.T) {
	for _, name := range mcpServers {
		t.Run(name, func(t *testing.T) {
			golden(t, filepath.Join("testdata", "stubs", "server-"+name+".pyi"), spine.Stubs(serverManifest(t, name)))
		})
	}
}
