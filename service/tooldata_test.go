package service_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/spine-run/spine/codemode"
	"github.com/spine-run/spine/internal/spinetest"
	"github.com/spine-run/spine/service"
)

// TestToolFileData: POST /v1/tool/call gives the images' data with
// ?file_data=images and every file's with ?file_data=all; without it, the
// names and sizes only; another value is 400.
func TestToolFileData(t *testing.T) {
	url := newServer(t, &service.Options{Tool: codemode.New(runner, nil)}).URL
	args, _ := json.Marshal(map[string]string{"source": spinetest.PNGSource + `
open("chart.png", "wb").write(png(4, 3))
open("notes.txt", "w").write("hello")
display({"image/png": png(1, 1)}, raw=True)`})

	_, plain, _ := callTool(t, url, string(args))
	if plain.IsError || plain.Images != nil || plain.Files != nil || len(plain.Result.Images) != 2 ||
		!strings.Contains(plain.Text, `"images":[{"source":"display","index":1,"mime_type":"image/png","width":1,"height":1,`) {
		t.Fatalf("without file_data: %+v", plain)
	}

	withImages := callToolData(t, url, "images", args)
	if withImages.Text != plain.Text || len(withImages.Images) != 2 || withImages.Files != nil ||
		withImages.Images[1].Label() != "chart.png" || !bytes.HasPrefix(withImages.Images[1].Data, []byte("\x89PNG\r\n")) ||
		withImages.Images[1].MIMEType != "image/png" || len(withImages.Images[1].Data) != withImages.Images[1].Bytes {
		t.Errorf("file_data=images: %+v", withImages.Images)
	}

	all := callToolData(t, url, "all", args)
	if len(all.Images) != 2 || len(all.Files) != 2 || all.Files[0].Name != "chart.png" || !bytes.Equal(all.Files[0].Data, all.Images[1].Data) ||
		all.Files[1].Name != "notes.txt" || string(all.Files[1].Data) != "hello" {
		t.Errorf("file_data=all: %+v", all.Files)
	}

	resp, err := http.Post(url+"/v1/tool/call?file_data=yes", "application/json", strings.NewReader(string(args)))
	if err != nil {
		t.Fatal(err)
	}
	var refused service.Response
	json.NewDecoder(resp.Body).Decode(&refused)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || refused.Error == nil || refused.Error.Message != `file_data "yes" is not none, images or all` {
		t.Errorf("file_data=yes: %d %+v", resp.StatusCode, refused.Error)
	}
}

// TestToolFileDataNone: asked for, images and files are [] when a program
// makes none, as docs/http.md says, and absent when the call did not run.
func TestToolFileDataNone(t *testing.T) {
	url := newServer(t, &service.Options{Tool: codemode.New(runner, nil)}).URL
	for _, c := range []struct{ data, args, want, absent string }{
		{"images", `{"source": "1 + 1"}`, `"images":[]`, `"files"`},
		{"all", `{"source": "1 + 1"}`, `"images":[],"files":[]`, ""},
		{"all", `{"source": "1 + 1", "typo": 1}`, `"is_error":true`, `"images"`}, // bad arguments: it did not run
	} {
		resp, err := http.Post(url+"/v1/tool/call?file_data="+c.data, "application/json", strings.NewReader(c.args))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(body), c.want) || c.absent != "" && strings.Contains(string(body), c.absent) {
			t.Errorf("file_data=%s of %s: %s", c.data, c.args, body)
		}
	}
}

// callToolData posts args to /v1/tool/call?file_data=data.
func callToolData(t *testing.T, url, data string, args []byte) service.ToolAnswer {
	t.Helper()
	resp, err := http.Post(url+"/v1/tool/call?file_data="+data, "application/json", bytes.NewReader(args))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var a service.ToolAnswer
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("file_data=%s: %d %v", data, resp.StatusCode, err)
	}
	return a
}
