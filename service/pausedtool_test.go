package service_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/spine-run/spine/codemode"
	"github.com/spine-run/spine/service"
)

// toolAnswer decodes an answer of /v1/tool/call.
func (c client) toolAnswer(status int, raw []byte) service.ToolAnswer {
	c.t.Helper()
	var a service.ToolAnswer
	if err := json.Unmarshal(raw, &a); err != nil {
		c.t.Fatalf("status %d, body %q: %v", status, raw, err)
	}
	return a
}

// TestToolClientTools: run_python's endpoints take client tools: POST
// /v1/tool describes run_python with their stubs beside the server's, and
// POST /v1/tool/call with the Spine-Tools header pauses at them as /v1/run
// does, the pause and the end being the model's answers.
func TestToolClientTools(t *testing.T) {
	tool := codemode.New(runner, nil)
	_, ts := newSessionServer(t, nil, &service.Options{Tool: tool})
	c := client{t: t, url: ts.URL}
	list, _ := json.Marshal([]any{weather, price})

	status, raw, _ := c.send("POST", "/v1/tool", "application/json", []byte(`{"tools": `+string(list)+`}`))
	var def service.ToolDefinition
	if err := json.Unmarshal(raw, &def); err != nil || status != http.StatusOK || def.Name != "run_python" {
		t.Fatalf("POST /v1/tool: status %d %s", status, raw)
	}
	for _, stub := range []string{"def get_weather(city: str)", "The weather in a city.", "class shop:", "def price(item: str)", "def lookup(key: str)"} {
		if !strings.Contains(def.Description, stub) {
			t.Errorf("the description has no %q:\n%s", stub, def.Description)
		}
	}
	if def.Description == tool.Description() || tool.DescriptionWith(nil) != tool.Description() {
		t.Errorf("the description with client tools is the server's own")
	}
	for body, want := range map[string]string{
		`{"tools": [{"name": "lookup"}]}`:    `"lookup" is one of the Runner's tools`,
		`{"tools": [{"name": "x", "y": 1}]}`: `unknown field "y"`,
		`{"tools": [{"name": "a-b"}]}`:       "not a Python identifier",
	} {
		status, raw, _ := c.send("POST", "/v1/tool", "application/json", []byte(body))
		if out := c.answer(status, raw); status != http.StatusBadRequest || out.Error == nil || !strings.Contains(out.Error.Message, want) {
			t.Errorf("POST /v1/tool %s: status %d %s, want 400 saying %s", body, status, raw, want)
		}
	}

	// JSON whatever the Accept: run_python's answers are not events.
	args := []byte(`{"source": "w = get_weather('Paris')\nprint(w)\nw['temp'] + lookup(key='book')"}`)
	status, raw, _ = c.send("POST", "/v1/tool/call", "application/json", args, "Spine-Tools", string(list), "Accept", "text/event-stream")
	a := c.toolAnswer(status, raw)
	if status != http.StatusOK || a.Status != "tool_calls" || !strings.HasPrefix(a.RunID, "run_") || len(a.Pending) != 1 ||
		a.Pending[0].Name != "get_weather" || string(a.Pending[0].Arguments) != `{"city":"Paris"}` {
		t.Fatalf("the pause: status %d %s", status, raw)
	}
	data, _ := json.Marshal(run{"results": []any{value(a.Pending[0].ID, map[string]any{"temp": 20})}})
	status, raw, _ = c.send("POST", "/v1/runs/"+a.RunID+"/tool_results", "application/json", data)
	end := c.toolAnswer(status, raw)
	if status != http.StatusOK || end.Status != "done" || end.RunID != a.RunID || end.IsError || !strings.Contains(end.Text, `"value":41`) ||
		end.Result == nil || end.Result.Stdout != "{'temp': 20}\n" {
		t.Fatalf("the end: status %d %s", status, raw)
	}

	// A program's error is the model's to read, as without client tools.
	args = []byte(`{"source": "get_weather(town='Oslo')"}`)
	status, raw, _ = c.send("POST", "/v1/tool/call", "application/json", args, "Spine-Tools", string(list))
	if a := c.toolAnswer(status, raw); status != http.StatusOK || !a.IsError || a.Status != "done" || !strings.Contains(a.Text, "TypeError") {
		t.Fatalf("a bad call: status %d %s", status, raw)
	}
	// A bad list, a server tool's name among them, is the caller's: 400.
	for _, tools := range []string{"[1]", `[{"name": "lookup"}]`} {
		status, raw, _ := c.send("POST", "/v1/tool/call", "application/json", args, "Spine-Tools", tools)
		if a := c.toolAnswer(status, raw); status != http.StatusBadRequest || !a.IsError || !strings.Contains(a.Text, "tools") {
			t.Errorf("tools %s: status %d %s", tools, status, raw)
		}
	}
}
