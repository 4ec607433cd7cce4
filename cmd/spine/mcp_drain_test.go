package main

import (
	"syscall"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/spine-run/spine/internal/spinetest"
)

// TestMCPDrainCutsAtGrace: spine mcp --http --session-write hibernate gets
// SIGTERM while a call that never ends is in flight. When --grace ends the
// call is stopped and answered (an error), its effect on the session
// undone; the session is written as it was before that call, and the
// process exits 0; another process then serves it.
func TestMCPDrainCutsAtGrace(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the spine command")
	}
	bin := buildSpine(t)
	args := []string{"mcp", "--http", "127.0.0.1:0", "--demo-tools", "--session-store", "file://" + t.TempDir(),
		"--session-write", "hibernate", "--grace", "1s", "--timeout", "5m"}
	p, addr := start(t, bin, args...)
	url := "http://" + addr
	route := spinetest.NewRouter(t, url, "", "")
	cs := route.Connect(t)
	mcpValue(t, cs, "n = 1", "null")

	started := spinetest.Metrics(t, url, "")["spine_runner_runs_started_total"]
	answered := make(chan error, 1)
	go func() {
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "run_python", Arguments: map[string]any{"source": "n = 2\nwhile True: pass"}})
		if err == nil && !res.IsError {
			t.Errorf("the call cut at the end of the grace period succeeded: %s", spinetest.Text(res))
		}
		answered <- err
	}()
	spinetest.WaitFor(t, "the call to be in flight", func() bool {
		return spinetest.Metrics(t, url, "")["spine_runner_runs_started_total"] > started
	})
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	p.waitLine(t, "stopping them")
	<-answered
	p.waitLine(t, "sessions stored")
	if code := p.wait(t); code != 0 {
		t.Fatalf("exit code %d", code)
	}

	next, addr := start(t, bin, args...)
	route.To(t, "http://"+addr)
	mcpValue(t, cs, "n", "1")
	next.stop(t)
}
