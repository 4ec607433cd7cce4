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
// recorded exchange of the messages API (testdata/N-response.json): the
// model's first program fails (a wrong key), it reads the traceback, fixes
// the program, then answers. It checks the requests the example sent: the
// first carries the run_python tool; the second the failure as a tool_result
// marked is_error, with the traceback Spine's Guest produced; the third the
// result of the fixed program; all as recorded (testdata/N-request.json).
func TestReplay(t *testing.T) {
	srv := replay.Serve(t, "testdata", "/v1/messages", func(r *http.Request) string {
		// The SDK sends the key as a bearer token; the API takes X-Api-Key too.
		if r.Header.Get("Authorization") != "Bearer test-key" && r.Header.Get("X-Api-Key") != "test-key" {
			return "no test-key: Authorization " + r.Header.Get("Authorization")
		}
		if r.Header.Get("Anthropic-Version") == "" {
			return "no Anthropic-Version"
		}
		return ""
	})
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), []string{"-base-url", srv.URL, "-api-key", "test-key", "What do 3 books and 2 pens cost?"}, &stdout, &stderr)
	if code != 0 || stdout.String() != "3 books and 2 pens cost 67.\n" {
		t.Errorf("exit %d, stdout %q, stderr:\n%s", code, stdout.String(), stderr.String())
	}

	requests := markTool(t, srv)
	if len(requests) == 3 {
		failed, _ := replay.Path(requests[1], "messages", -1, "content", 0).(map[string]any)
		text, _ := replay.Path(failed, "content", 0, "text").(string)
		if failed["type"] != "tool_result" || failed["tool_use_id"] != "toolu_01Ab3Cd4Ef5Gh6Ij7Kl8Mn9P" || failed["is_error"] != true ||
			!strings.HasPrefix(text, "Traceback (most recent call last):\n  File \"<agent>\", line 1, in <module>\n") ||
			!strings.HasSuffix(text, "RuntimeError: no such key: \"books\"") {
			t.Errorf("the failed program's result sent: %v", failed)
		}
		ok, _ := replay.Path(requests[2], "messages", -1, "content", 0).(map[string]any)
		if ok["type"] != "tool_result" || ok["tool_use_id"] != "toolu_01Qr2St3Uv4Wx5Yz6Ab7Cd8E" || ok["is_error"] != false ||
			replay.Path(ok, "content", 0, "text") != `{"value":67,"stdout":"{'book': 21, 'pen': 2}\n"}` {
			t.Errorf("the fixed program's result sent: %v", ok)
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
		tool, _ := replay.Path(req, "tools", 0).(map[string]any)
		if tool["name"] != codemode.ToolName || tool["description"] != codemode.Description(manifest(), nil) ||
			replay.Path(tool, "input_schema", "required", 0) != "source" {
			t.Errorf("request %d: the tool is not codemode's: %v", i+1, tool)
		}
		tool["description"] = descriptionMark
	}
	return requests
}

// TestReplayImage: the model's program looks up the prices and draws them
// as a bar chart, a PNG it writes by hand; the tool_result the example sends
// has the result's text, which lists the image, then the image itself as an
// image block (base64), the chart as drawn; all as recorded
// (testdata/image).
func TestReplayImage(t *testing.T) {
	srv := replay.Serve(t, "testdata/image", "/v1/messages", func(*http.Request) string { return "" })
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), []string{"-base-url", srv.URL, "-api-key", "test-key", "Draw a bar chart of the prices of a book and a pen."}, &stdout, &stderr)
	if code != 0 || stdout.String() != "Here is the chart: the book's bar (21) towers over the pen's (2).\n" {
		t.Errorf("exit %d, stdout %q, stderr:\n%s", code, stdout.String(), stderr.String())
	}
	requests := markTool(t, srv)
	if len(requests) == 2 {
		result, _ := replay.Path(requests[1], "messages", -1, "content", 0).(map[string]any)
		text, _ := replay.Path(result, "content", 0, "text").(string)
		if result["type"] != "tool_result" || result["is_error"] != false || !strings.HasPrefix(text, `{"value":{"book":21,"pen":2},"stdout":"","files":[{"name":"prices.png","bytes":`) ||
			!strings.Contains(text, `"images":[{"source":"file","name":"prices.png","mime_type":"image/png","width":40,"height":24,"bytes":`) {
			t.Errorf("the tool_result's text: %v", result)
		}
		image, _ := replay.Path(result, "content", 1).(map[string]any)
		data, _ := replay.Path(image, "source", "data").(string)
		if image["type"] != "image" || replay.Path(image, "source", "type") != "base64" || replay.Path(image, "source", "media_type") != "image/png" {
			t.Errorf("the image block: %.200v", image)
		}
		replay.CheckChart(t, data)
	}
	srv.Check(*update)
}
