package main

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/spine-run/spine/internal/spinetest"
)

// imageProgram writes a PNG made by hand and a text file.
var imageProgram = spinetest.PNGSource + `
open("chart.png", "wb").write(png(4, 3))
open("notes.txt", "w").write("hello")
"drawn"`

// TestImagesProcess: spine mcp, as a process over stdio, sends a program's
// PNG as ImageContent, and with --no-images as a resource like any file;
// spine serve's /v1/tool/call gives its data with file_data=images, and with
// --no-images none, its description promising none.
func TestImagesProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the spine command")
	}
	bin := buildSpine(t)
	for _, noImages := range []bool{false, true} {
		args := []string{"mcp", "--demo-tools"}
		if noImages {
			args = append(args, "--no-images")
		}
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			cmd := exec.Command(bin, args...)
			cmd.Env = append(os.Environ(), "SPINE_CONFIG=")
			client := mcp.NewClient(&mcp.Implementation{Name: "spine-test", Version: "v0"}, nil)
			cs, err := client.Connect(t.Context(), &mcp.CommandTransport{Command: cmd}, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cs.Close() }) // ends the child when the subtest ends, failed or not
			res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "run_python", Arguments: map[string]any{"source": imageProgram}})
			if err != nil || res.IsError {
				t.Fatalf("%v %v", err, res)
			}
			var kinds []string
			for _, c := range res.Content {
				switch c := c.(type) {
				case *mcp.TextContent:
					kinds = append(kinds, "text")
				case *mcp.ImageContent:
					kinds = append(kinds, c.MIMEType)
				case *mcp.EmbeddedResource:
					kinds = append(kinds, c.Resource.URI)
				}
			}
			want := "text image/png file:///work/notes.txt"
			if noImages {
				want = "text file:///work/chart.png file:///work/notes.txt"
			}
			if got := strings.Join(kinds, " "); got != want {
				t.Errorf("content %s, want %s", got, want)
			}
		})
	}

	for _, noImages := range []bool{false, true} {
		args := []string{"serve", "--listen", "127.0.0.1:0", "--demo-tools"}
		if noImages {
			args = append(args, "--no-images")
		}
		p, addr := start(t, bin, args...)
		body, _ := json.Marshal(map[string]string{"source": imageProgram})
		resp, err := http.Post("http://"+addr+"/v1/tool/call?file_data=images", "application/json", strings.NewReader(string(body)))
		if err != nil {
			t.Fatal(err)
		}
		var answer struct {
			Text   string
			Images []struct {
				MIMEType string `json:"mime_type"`
				Data     []byte
			}
		}
		err = json.NewDecoder(resp.Body).Decode(&answer)
		resp.Body.Close()
		resp, err2 := http.Get("http://" + addr + "/v1/tool")
		var def struct{ Description string }
		if err2 == nil {
			json.NewDecoder(resp.Body).Decode(&def)
			resp.Body.Close()
		}
		promised := strings.Contains(def.Description, "shown to you as images")
		switch {
		case err != nil || err2 != nil:
			t.Errorf("spine %s: %v %v", strings.Join(args, " "), err, err2)
		case noImages && (len(answer.Images) != 0 || strings.Contains(answer.Text, `"images"`) || promised):
			t.Errorf("spine serve --no-images: %s; the description promises images: %v", answer.Text, promised)
		case !noImages && (len(answer.Images) != 1 || answer.Images[0].MIMEType != "image/png" || !strings.HasPrefix(string(answer.Images[0].Data), "\x89PNG") || !promised):
			t.Errorf("spine serve: %s, %d images; the description promises images: %v", answer.Text, len(answer.Images), promised)
		}
		p.cmd.Process.Signal(syscall.SIGTERM)
		if code := p.wait(t); code != 0 {
			t.Errorf("exit code %d", code)
		}
	}
}
