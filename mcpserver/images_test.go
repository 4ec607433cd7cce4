package mcpserver_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/spine-run/spine/internal/spinetest"
	"github.com/spine-run/spine/mcpserver"
)

// TestImages: the images a run makes reach the client as ImageContent
// after the text, through the real SDK client over streamable HTTP; an image
// file is not sent again as a resource, other files are; past the caps the
// text says what was left out. Options.MaxImages reaches run_python.
func TestImages(t *testing.T) {
	server := mcpserver.New(runner, &mcpserver.Options{MaxImageBytes: 40 << 10})
	cs := spinetest.ConnectHTTP(t, spinetest.ServeHTTP(t, spinetest.MCPHandler(server)).URL)
	res := call(t, cs, map[string]any{"source": spinetest.PNGSource + `
open("chart.png", "wb").write(png(4, 3))
open("big.png", "wb").write(png(120, 120, seed=1))
open("notes.txt", "w").write("hello")
display({"image/png": png(2, 2)}, raw=True)
"done"`})
	if res.IsError {
		t.Fatalf("run failed: %s", spinetest.Text(res))
	}
	var kinds []string
	var images []*mcp.ImageContent
	for _, c := range res.Content {
		switch c := c.(type) {
		case *mcp.TextContent:
			kinds = append(kinds, "text")
		case *mcp.ImageContent:
			kinds = append(kinds, "image "+c.MIMEType)
			images = append(images, c)
		case *mcp.EmbeddedResource:
			kinds = append(kinds, "resource "+c.Resource.URI)
		}
	}
	if strings.Join(kinds, ", ") != "text, image image/png, image image/png, resource file:///work/big.png, resource file:///work/notes.txt" {
		t.Errorf("content: %s", strings.Join(kinds, ", "))
	}
	var sc mcpserver.Result
	structured, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(structured, &sc); err != nil || len(sc.Images) != 2 || sc.Images[0].Label() != "display 1" || sc.Images[1].Label() != "chart.png" ||
		sc.ImagesLeftOut != "1 image left out: over the 40 KiB limit per image (big.png)" {
		t.Fatalf("structuredContent %s", structured)
	}
	if len(images) == 2 && (!bytes.HasPrefix(images[1].Data, []byte("\x89PNG")) || len(images[1].Data) != sc.Images[1].Bytes) {
		t.Errorf("chart.png: %d bytes, %q...", len(images[1].Data), images[1].Data[:min(8, len(images[1].Data))])
	}
	if text := spinetest.Text(res); !strings.Contains(text, `"images_left_out":"1 image left out: over the 40 KiB limit per image (big.png)"`) {
		t.Errorf("text %s", text)
	}
	tools, err := cs.ListTools(t.Context(), nil)
	if err != nil || !strings.Contains(tools.Tools[0].Description, "shown to you as images after the result: at most 8 per call, 40 KiB each and 4 MiB in all") {
		t.Fatalf("description: %v", err)
	}
	if d := mcpserver.Description(manifest, &mcpserver.Options{MaxImages: 3}); !strings.Contains(d, "at most 3 per call, 1 MiB each") {
		t.Errorf("MaxImages 3: the description:\n%s", d)
	}
}
