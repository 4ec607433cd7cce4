package mcpserver_test

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/spine-run/spine/internal/spinetest"
	"github.com/spine-run/spine/mcpserver"
)

// TestFiles: run_python takes files as text or base64 data and returns the
// files the program made as embedded resources, through the real SDK client
// over streamable HTTP; files are each call's own, in a session too.
func TestFiles(t *testing.T) {
	server := mcpserver.New(runner, nil)
	cs := spinetest.ConnectHTTP(t, spinetest.ServeHTTP(t, spinetest.MCPHandler(server)).URL)
	res := call(t, cs, map[string]any{
		"source": `import os
rows = open("in/data.csv").read().splitlines()
open("report.md", "w").write("# " + rows[0])
open("raw.bin", "wb").write(open("blob", "rb").read()[::-1])
result = sorted(os.listdir("."))`,
		"files": []map[string]any{
			{"name": "in/data.csv", "text": "a,b\n1,2\n"},
			{"name": "blob", "data": base64.StdEncoding.EncodeToString([]byte{0, 1, 2, 255})},
		},
	})
	if res.IsError {
		t.Fatalf("run failed: %s", spinetest.Text(res))
	}
	var sc mcpserver.Result
	structured, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(structured, &sc); err != nil || string(sc.Value) != `["blob","in","raw.bin","report.md"]` ||
		len(sc.Files) != 2 || sc.Files[0] != (mcpserver.FileInfo{Name: "raw.bin", Bytes: 4}) || sc.Files[1] != (mcpserver.FileInfo{Name: "report.md", Bytes: 5}) {
		t.Fatalf("structuredContent %s", structured)
	}
	var resources []*mcp.ResourceContents
	for _, c := range res.Content {
		if r, ok := c.(*mcp.EmbeddedResource); ok {
			resources = append(resources, r.Resource)
		}
	}
	if len(resources) != 2 || resources[0].URI != "file:///work/raw.bin" || string(resources[0].Blob) != "\xff\x02\x01\x00" ||
		resources[1].URI != "file:///work/report.md" || resources[1].Text != "# a,b" {
		t.Fatalf("resources %+v", resources)
	}

	// The next call of the same session: variables kept, files not.
	res = call(t, cs, map[string]any{"source": "import os; [rows, os.listdir('.')]"})
	if res.IsError || !strings.HasPrefix(spinetest.Text(res), `{"value":[["a,b","1,2"],[]]`) {
		t.Fatalf("next call: %s", spinetest.Text(res))
	}

	// A failed run still returns its files, after the error.
	res = call(t, cs, map[string]any{"source": "open('partial.txt', 'w').write('p'); 1/0"})
	if !res.IsError || len(res.Content) != 2 || res.Content[1].(*mcp.EmbeddedResource).Resource.Text != "p" {
		t.Fatalf("failed run: %+v", res.Content)
	}

	for _, files := range []any{
		[]map[string]any{{"name": "../x", "text": ""}},
		[]map[string]any{{"name": "x", "text": "", "data": ""}},
		[]map[string]any{{"name": "x", "data": "not base64!"}},
		[]map[string]any{{"name": "x", "size": 3}},
	} {
		res := call(t, cs, map[string]any{"source": "1", "files": files})
		if !res.IsError || !strings.HasPrefix(spinetest.Text(res), "bad arguments: ") {
			t.Errorf("%v: IsError %v, %q", files, res.IsError, spinetest.Text(res))
		}
	}
	tools, err := cs.ListTools(t.Context(), nil)
	if err != nil || !strings.Contains(tools.Tools[0].Description, "working directory (/work)") {
		t.Fatalf("description: %v", err)
	}
}
