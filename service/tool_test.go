package service_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/spine-run/spine/codemode"
	"github.com/spine-run/spine/service"
)

// callTool posts args, a model's run_python arguments, to /v1/tool/call.
func callTool(t *testing.T, url, args string) (int, service.ToolAnswer, http.Header) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), "POST", url+"/v1/tool/call", strings.NewReader(args))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var a service.ToolAnswer
	if err := json.Unmarshal(raw, &a); err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
	return resp.StatusCode, a, resp.Header
}

// TestTool: an agent in any language declares run_python from GET /v1/tool
// and sends the model's calls to POST /v1/tool/call, whose text it gives
// the model back, whatever the outcome.
func TestTool(t *testing.T) {
	tool := codemode.New(runner, nil)
	url := newServer(t, &service.Options{Tool: tool, Slots: 1}).URL

	resp, err := http.Get(url + "/v1/tool")
	if err != nil {
		t.Fatal(err)
	}
	var def service.ToolDefinition
	err = json.NewDecoder(resp.Body).Decode(&def)
	resp.Body.Close()
	var schema bytes.Buffer
	json.Compact(&schema, tool.InputSchema())
	if err != nil || def.Name != "run_python" || def.Description != tool.Description() ||
		!bytes.Equal(def.InputSchema, schema.Bytes()) || !strings.Contains(def.Description, "def lookup(key: str)") {
		t.Errorf("%v: %s %s", err, def.Name, def.InputSchema)
	}

	for _, c := range []struct {
		args, text string
		isError    bool
	}{
		{`{"source": "print('pricing')\nlookup(key='book') * inputs['n']", "inputs": {"n": 3}}`, `{"value":63,"stdout":"pricing\n"}`, false},
		{`{"source": "lookup(key='unicorn')"}`, "Traceback (most recent call last):\n  File \"<agent>\", line 1, in <module>\n    lookup(key='unicorn')\nRuntimeError: no such key: \"unicorn\"", true},
		{`{"code": "1"}`, `bad arguments: run_python() got an unexpected keyword argument 'code'`, true},
	} {
		status, a, _ := callTool(t, url, c.args)
		if status != http.StatusOK || a.Text != c.text || a.IsError != c.isError {
			t.Errorf("%s: %d %+v", c.args, status, a)
		}
	}
	if _, a, _ := callTool(t, url, `{"source": "result = {'a': 1}"}`); a.Result == nil || string(a.Result.Value) != `{"a":1}` {
		t.Errorf("result %+v", a.Result)
	}

	// Every slot busy: 429, and a text the model can act on.
	done := make(chan struct{})
	go func() {
		defer close(done)
		if _, a, _ := callTool(t, url, `{"source": "gate()"}`); a.Text != `{"value":"opened","stdout":""}` {
			t.Errorf("the gated call: %+v", a)
		}
	}()
	<-tools.Gate.Entered
	status, a, header := callTool(t, url, `{"source": "1"}`)
	if status != http.StatusTooManyRequests || header.Get("Retry-After") == "" || !a.IsError || !strings.HasPrefix(a.Text, "busy, retry: ") {
		t.Errorf("busy: %d %+v", status, a)
	}
	tools.Gate.Let()
	<-done
}

// TestToolOff: without Options.Tool there are no tool endpoints.
func TestToolOff(t *testing.T) {
	url := newServer(t, nil).URL
	resp, err := http.Get(url + "/v1/tool")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /v1/tool: %d", resp.StatusCode)
	}
}
