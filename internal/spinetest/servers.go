package spinetest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spine-run/spine"
)

// MCPServers are the published MCP servers whose tools/list answers the
// repository keeps in testdata/mcp-servers (its README says where each came
// from).
var MCPServers = []string{"everything", "filesystem", "memory", "sequential-thinking"}

// ServerManifest is the manifest of the MCP server whose tools/list answer
// is dir/NAME.json, as mcpclient makes it with the namespace NAME (a "-"
// made "_" in both), each tool's Call call.
func ServerManifest(t testing.TB, dir, name string, call spine.Tool) spine.Manifest {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Tools []struct {
			Name         string          `json:"name"`
			Title        string          `json:"title"`
			Description  string          `json:"description"`
			InputSchema  json.RawMessage `json:"inputSchema"`
			OutputSchema json.RawMessage `json:"outputSchema"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(data, &list); err != nil {
		t.Fatal(err)
	}
	namespace := strings.ReplaceAll(name, "-", "_")
	m := make(spine.Manifest)
	for _, tool := range list.Tools {
		description := tool.Description
		if description == "" {
			description = tool.Title
		}
		m[namespace+"."+strings.ReplaceAll(tool.Name, "-", "_")] = spine.ToolSpec{Call: call, Description: description,
			InputSchema: tool.InputSchema, OutputSchema: tool.OutputSchema}
	}
	return m
}
