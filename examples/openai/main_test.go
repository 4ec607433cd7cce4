package main

import (
	"bytes"
	"flag"
	"net/http"
	"strings"
	"testing"

	"github.com/spine-run/spine/codemode"
	"github.com/spine-run/spine/examples/internal/replay"
)

var update = flag.Bool("update", false, "rewrite testdata/*-request.json with the requests the example sent")

// descriptionMark stands for run_python's description in the recorded
// requests: the test checks the description against codemode's apart.
const descriptionMark = "<run_python's description>"

// TestReplay runs the example against a local server that answers with a
// recorded exchange of the chat completions API (testdata/N-response.json):
// the model calls run_python once, then answers. It checks the requests the
// example sent: the first carries the run_python tool, the second the tool's
// result as Spine computed it by running the model's program in the real
// Guest; both as recorded (testdata/N-request.json).
func TestReplay(t *testing.T) {
	srv := replay.Serve(t, "testdata", "/v1/chat/completions", func(r *http.Request) string {
		if got := r.Header.Get("Authorization"); got != "Bearer test-key" {
			return "Authorization " + got
		}
		return ""
	})
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), []string{"-base-url", srv.URL + "/v1", "-api-key", "test-key", "What do 3 books and 2 pens cost?"}, &stdout, &stderr)
	if code != 0 || stdout.String() != "3 books and 2 pens cost 67.\n" {
		t.Errorf("exit %d, stdout %q, stderr:\n%s", code, stdout.String(), stderr.String())
	}

	requests := markTool(t, srv)
	if len(requests) == 2 {
		// The program printed the prices and set result: Spine's answer.
		tool, _ := replay.Path(requests[1], "messages", -1).(map[string]any)
		if tool["role"] != "tool" || tool["tool_call_id"] != "call_x7Kq2mWbN4pR9sTd" ||
			tool["content"] != `{"value":67,"stdout":"{'book': 21, 'pen': 2}\n"}` {
			t.Errorf("the tool result sent: %v", tool)
		}
	}
	srv.Check(*update)
}

// markTool returns the requests srv received, after checking that each
// declares codemode's tool, whose description it replaces by
// descriptionMark.
func markTool(t *testing.T, srv *replay.Server) []map[string]any {
	t.Helper()
	requests := srv.Requests()
	for i, req := range requests {
		fn, _ := replay.Path(req, "tools", 0, "function").(map[string]any)
		if fn["name"] != codemode.ToolName || fn["description"] != codemode.Description(manifest(), nil) {
			t.Errorf("request %d: the tool is not codemode's: %v", i+1, fn)
		}
		fn["description"] = descriptionMark
	}
	return requests
}

// TestReplayImage: the model's program looks up the prices and draws them
// as a bar chart, a PNG it writes by hand; the example sends the result's
// text, which lists the image, as the tool message, then (a tool message
// holds only text) a user message naming the call's images with the chart
// as an image_url part, a data URL; all as recorded (testdata/image).
func TestReplayImage(t *testing.T) {
	srv := replay.Serve(t, "testdata/image", "/v1/chat/completions", func(*http.Request) string { return "" })
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), []string{"-base-url", srv.URL + "/v1", "-api-key", "test-key", "Draw a bar chart of the prices of a book and a pen."}, &stdout, &stderr)
	if code != 0 || stdout.String() != "Here is the chart: the book's bar (21) towers over the pen's (2).\n" {
		t.Errorf("exit %d, stdout %q, stderr:\n%s", code, stdout.String(), stderr.String())
	}
	requests := markTool(t, srv)
	if len(requests) == 2 {
		tool, _ := replay.Path(requests[1], "messages", -2).(map[string]any)
		text, _ := tool["content"].(string)
		if tool["role"] != "tool" || tool["tool_call_id"] != "call_p4Lm8qZcR2vW6nTy" || !strings.HasPrefix(text, `{"value":{"book":21,"pen":2},"stdout":"","files":[{"name":"prices.png","bytes":`) ||
			!strings.Contains(text, `"images":[{"source":"file","name":"prices.png","mime_type":"image/png","width":40,"height":24,"bytes":`) {
			t.Errorf("the tool message: %v", tool)
		}
		user, _ := replay.Path(requests[1], "messages", -1).(map[string]any)
		url, _ := replay.Path(user, "content", 1, "image_url", "url").(string)
		data, ok := strings.CutPrefix(url, "data:image/png;base64,")
		if user["role"] != "user" || replay.Path(user, "content", 0, "text") != "The images of run_python call call_p4Lm8qZcR2vW6nTy: prices.png." ||
			replay.Path(user, "content", 1, "type") != "image_url" || !ok {
			t.Errorf("the user message of images: %.300v", user)
		}
		replay.CheckChart(t, data)
	}
	srv.Check(*update)
}
