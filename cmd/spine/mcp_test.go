package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spine-run/spine/internal/spinetest"
	"github.com/spine-run/spine/mcpserver"
)

// TestMCPProcess drives spine mcp, built and run as a process, with the SDK's
// MCP client: over stdio, then over streamable HTTP, then over stdio with
// --stateless.
func TestMCPProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the spine command")
	}
	bin := buildSpine(t)

	t.Run("stdio", func(t *testing.T) {
		cmd := exec.Command(bin, "mcp", "--demo-tools")
		cmd.Env = append(os.Environ(), "SPINE_CONFIG=") // the demo tools only
		client := mcp.NewClient(&mcp.Implementation{Name: "spine-test", Version: "v0"}, nil)
		cs, err := client.Connect(t.Context(), &mcp.CommandTransport{Command: cmd}, nil)
		if err != nil {
			t.Fatal(err)
		}
		checkMCP(t, cs)
		checkMCPState(t, cs, true)
		// Closing stdin ends the server; CommandTransport waits for it.
		if err := cs.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
		if code := cmd.ProcessState.ExitCode(); code != 0 {
			t.Errorf("exit code %d", code)
		}
	})

	t.Run("stdio stateless", func(t *testing.T) {
		cmd := exec.Command(bin, "mcp", "--demo-tools", "--stateless")
		cmd.Env = append(os.Environ(), "SPINE_CONFIG=")
		client := mcp.NewClient(&mcp.Implementation{Name: "spine-test", Version: "v0"}, nil)
		cs, err := client.Connect(t.Context(), &mcp.CommandTransport{Command: cmd}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		checkMCPState(t, cs, false)
	})

	t.Run("http", func(t *testing.T) {
		p, addr := start(t, bin, "mcp", "--http", "127.0.0.1:0", "--early-reads", "--demo-tools")
		client := mcp.NewClient(&mcp.Implementation{Name: "spine-test", Version: "v0"}, nil)
		// The client keeps an event stream open (GET): shutdown must not
		// wait for it.
		cs, err := client.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: "http://" + addr + "/mcp"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		checkMCP(t, cs)
		checkMCPState(t, cs, true)
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if code := p.wait(t); code != 0 {
			t.Errorf("exit code %d after SIGTERM", code)
		}
	})
}

// checkMCPState checks that what one call defines is there for the next one
// (kept) or not.
func checkMCPState(t *testing.T, cs *mcp.ClientSession, kept bool) {
	t.Helper()
	for i, source := range []string{"x = lookup(key='book')", "'x' in globals()"} {
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "run_python", Arguments: map[string]any{"source": source}})
		if err != nil {
			t.Fatal(err)
		}
		want := `{"value":null,"stdout":""}`
		if i == 1 {
			want = fmt.Sprintf(`{"value":%v,"stdout":""}`, kept)
		}
		if res.IsError || spinetest.Text(res) != want {
			t.Errorf("%q: IsError %v, %q, want %s", source, res.IsError, spinetest.Text(res), want)
		}
	}
}

// checkMCP checks the server's one tool: its description with the demo
// tools' stubs, a run, and a Python error as an error result.
func checkMCP(t *testing.T, cs *mcp.ClientSession) {
	t.Helper()
	tools, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(tools.Tools) != 1 || tools.Tools[0].Name != "run_python" {
		t.Fatalf("tools: %+v", tools.Tools)
	}
	for _, want := range []string{"def lookup(key: str) -> Any:", "class prices:", "def list(limit: int | None = None) -> Any:"} {
		if !strings.Contains(tools.Tools[0].Description, want) {
			t.Errorf("the description lacks %q:\n%s", want, tools.Tools[0].Description)
		}
	}

	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "run_python", Arguments: map[string]any{
		"source": "print('pricing')\nresult = lookup(key='book') * inputs['quantity']",
		"inputs": map[string]any{"quantity": 3},
	}})
	if err != nil {
		t.Fatal(err)
	}
	structured, _ := json.Marshal(res.StructuredContent)
	var got struct {
		Value  json.RawMessage
		Stdout string
	}
	if res.IsError || json.Unmarshal(structured, &got) != nil || string(got.Value) != "63" || got.Stdout != "pricing\n" {
		t.Errorf("run: IsError %v, structuredContent %s, content %s", res.IsError, structured, spinetest.Text(res))
	}
	if text := spinetest.Text(res); text != `{"value":63,"stdout":"pricing\n"}` {
		t.Errorf("text content %q", text)
	}

	res, err = cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "run_python", Arguments: map[string]any{
		"source": "items = prices.list()\nitems[5]",
	}})
	if err != nil {
		t.Fatal(err)
	}
	if text := spinetest.Text(res); !res.IsError || !strings.Contains(text, `File "<agent>", line 2`) || !strings.Contains(text, "IndexError: list index out of range") {
		t.Errorf("Python error: IsError %v, text:\n%s", res.IsError, text)
	}
}

// TestMCPGracefulShutdown serves MCP over HTTP in process, so that the test
// can see a call in flight (its program calls gate(wait=False)), then ends the
// serving context as a signal would: the call gets its answer, and the
// client's open event stream does not hold the shutdown up.
func TestMCPGracefulShutdown(t *testing.T) {
	gate := spinetest.NewGate()
	manifest := demoTools()
	manifest["gate"] = gate.Tool()
	runner := spinetest.NewRunner(t, manifest, nil)
	server := mcpserver.NewServer(runner, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var stderr strings.Builder
	served := make(chan int, 1)
	go func() {
		served <- serveMCP(ctx, stop, ln, server, mcpHTTP{runner: runner, log: slog.New(slog.DiscardHandler)}, serving{grace: time.Hour, log: serverLog{name: "spine mcp", w: &stderr}})
	}()

	client := mcp.NewClient(&mcp.Implementation{Name: "spine-test", Version: "v0"}, nil)
	cs, err := client.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: "http://" + ln.Addr().String() + "/mcp"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	type answer struct {
		res *mcp.CallToolResult
		err error
	}
	answers := make(chan answer, 1)
	go func() {
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "run_python", Arguments: map[string]any{
			"source": "gate(wait=False)\nimport time\ntime.sleep(0.5)\n'done'",
		}})
		answers <- answer{res, err}
	}()
	<-gate.Entered // the call is in flight
	stop()
	a := <-answers
	if a.err != nil || a.res.IsError || spinetest.Text(a.res) != `{"value":"done","stdout":""}` {
		t.Fatalf("call in flight: %v %+v", a.err, a.res)
	}
	if code := <-served; code != exitOK {
		t.Fatalf("serveMCP: exit %d\n%s", code, stderr.String())
	}
}
