package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestAskProcess: with --ask, spine serve pauses a run at a call of a
// matching tool until its caller allows it, and spine mcp asks its
// client's user through elicitation (over stdio).
func TestAskProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the spine command")
	}
	bin := buildSpine(t)

	t.Run("serve", func(t *testing.T) {
		_, addr := start(t, bin, "serve", "--listen", "127.0.0.1:0", "--demo-tools", "--ask", "look*")
		url := "http://" + addr
		var paused struct {
			Status    string
			RunID     string `json:"run_id"`
			Approvals []struct{ ID, Tool, Reason string }
		}
		resp, err := http.Post(url+"/v1/run", "application/json", strings.NewReader(`{"source": "lookup(key='book') * 2"}`))
		if err != nil {
			t.Fatal(err)
		}
		err = json.NewDecoder(resp.Body).Decode(&paused)
		resp.Body.Close()
		if err != nil || paused.Status != "approval_required" || len(paused.Approvals) != 1 || paused.Approvals[0].Tool != "lookup" ||
			paused.Approvals[0].Reason != "calls of lookup wait for a person (--ask look*): the call needs a person's approval" {
			t.Fatalf("pause %+v: %v", paused, err)
		}
		status, out, err := post(t, url+"/v1/runs/"+paused.RunID+"/approvals", `{"approvals": [{"id": "`+paused.Approvals[0].ID+`", "allow": true}]}`)
		if err != nil || status != http.StatusOK || string(out.Value) != "42" {
			t.Fatalf("status %d %+v: %v", status, out, err)
		}
	})

	for _, version := range []string{"2025-11-25", "2026-07-28"} { // elicitation during the call; input requests
		t.Run("mcp "+version, func(t *testing.T) { askMCP(t, bin, version) })
	}
}

// askMCP checks that spine mcp --ask asks its client's user, speaking
// version over stdio.
func askMCP(t *testing.T, bin, version string) {
	cmd := exec.Command(bin, "mcp", "--demo-tools", "--ask", "lookup")
	cmd.Env = append(os.Environ(), "SPINE_CONFIG=")
	var asked string
	client := mcp.NewClient(&mcp.Implementation{Name: "spine-test", Version: "v0"}, &mcp.ClientOptions{
		ElicitationHandler: func(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			asked = req.Params.Message
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"allow": false, "reason": "ask me tomorrow"}}, nil
		}})
	cs, err := client.Connect(t.Context(), &mcp.CommandTransport{Command: cmd}, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if v := cs.InitializeResult().ProtocolVersion; v != version {
		t.Fatalf("the client speaks %s", v)
	}
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "run_python", Arguments: map[string]any{
		"source": "try:\n    lookup(key='book')\nexcept PermissionError as e:\n    result = str(e)"}})
	if err != nil || res.IsError || len(res.Content) == 0 {
		t.Fatalf("%+v: %v", res, err)
	}
	if text := res.Content[0].(*mcp.TextContent).Text; text != `{"value":"ask me tomorrow","stdout":""}` || !strings.Contains(asked, `lookup with {"key":"book"}`) {
		t.Fatalf("result %s, asked %q", text, asked)
	}
}
