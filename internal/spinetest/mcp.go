package spinetest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// NewMCPServer returns the test MCP server; pageSize 0 is the SDK's
// default, a small one makes tools/list paginate. Its tools answer with
// structured content, text, several text parts, an image and an error
// result; one reads the server's environment and one waits:
//
//	add(a, b)              {"sum": a+b}, as structured content
//	echo(text, times=1)    text repeated, as text
//	lines()                two text parts, the second one JSON text
//	fail(reason)           an error result "failed on purpose: REASON"
//	picture()              a caption and a one-pixel image
//	get-issue(number, ...) an issue, as structured content; the name is not
//	                       a Python identifier
//	getenv(name)           the server process's environment variable
//	slow(ms)               "done" after ms milliseconds, or when cancelled
//
// Every tool claims to be read-only and idempotent: the annotations must not
// be enough for a client to read early.
func NewMCPServer(pageSize int) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "spine-testserver", Version: "v0"}, &mcp.ServerOptions{PageSize: pageSize})
	readOnly := &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true}

	type addIn struct {
		A int `json:"a" jsonschema:"the first addend"`
		B int `json:"b" jsonschema:"the second addend"`
	}
	type addOut struct {
		Sum int `json:"sum"`
	}
	mcp.AddTool(s, &mcp.Tool{Name: "add", Description: "Add two integers.", Annotations: readOnly},
		func(ctx context.Context, req *mcp.CallToolRequest, in addIn) (*mcp.CallToolResult, addOut, error) {
			return nil, addOut{Sum: in.A + in.B}, nil
		})

	raw(s, &mcp.Tool{
		Name:        "echo",
		Description: "Repeat text.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string","description":"what to say"},"times":{"type":"integer","default":1}},"required":["text"]}`),
		Annotations: readOnly,
	}, func(args map[string]any) *mcp.CallToolResult {
		times := 1
		if n, ok := args["times"].(float64); ok {
			times = int(n)
		}
		text, _ := args["text"].(string)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: strings.Repeat(text, times)}}}
	})

	raw(s, &mcp.Tool{
		Name:        "lines",
		Description: "Answer with two text parts, the second one JSON text.",
		InputSchema: json.RawMessage(`{"type":"object"}`),
		Annotations: readOnly,
	}, func(map[string]any) *mcp.CallToolResult {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "first"}, &mcp.TextContent{Text: `{"n": 1}`}}}
	})

	raw(s, &mcp.Tool{
		Name:        "fail",
		Description: "Always fails with an error result.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"reason":{"type":"string"}}}`),
		Annotations: readOnly,
	}, func(args map[string]any) *mcp.CallToolResult {
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("failed on purpose: %v", args["reason"])}}}
	})

	raw(s, &mcp.Tool{
		Name:        "picture",
		Description: "A one-pixel image and its caption.",
		InputSchema: json.RawMessage(`{"type":"object"}`),
		Annotations: readOnly,
	}, func(map[string]any) *mcp.CallToolResult {
		return &mcp.CallToolResult{Content: []mcp.Content{
			&mcp.TextContent{Text: "a dot"},
			&mcp.ImageContent{MIMEType: "image/png", Data: []byte{0x89, 'P', 'N', 'G'}},
		}}
	})

	raw(s, &mcp.Tool{
		Name:         "get-issue",
		Title:        "Get an issue",
		Description:  "Return an issue by number; the name is not a Python identifier.",
		InputSchema:  json.RawMessage(`{"type":"object","properties":{"number":{"type":"integer","description":"the issue number"},"state":{"enum":["open","closed"]},"repo.name":{"type":["string","null"]}},"required":["number"]}`),
		OutputSchema: json.RawMessage(`{"type":"object","properties":{"number":{"type":"integer"},"title":{"type":"string"},"labels":{"type":"array","items":{"type":"string"}}},"required":["number","title"]}`),
		Annotations:  readOnly,
	}, func(args map[string]any) *mcp.CallToolResult {
		return &mcp.CallToolResult{StructuredContent: map[string]any{"number": args["number"], "title": "Spine crashes", "labels": []string{"bug"}}}
	})

	raw(s, &mcp.Tool{
		Name:        "getenv",
		Description: "Return an environment variable of the server process.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}`),
		Annotations: readOnly,
	}, func(args map[string]any) *mcp.CallToolResult {
		name, _ := args["name"].(string)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: os.Getenv(name)}}}
	})

	s.AddTool(&mcp.Tool{
		Name:        "slow",
		Description: "Wait ms milliseconds, or until the call is cancelled.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"ms":{"type":"integer"}},"required":["ms"]}`),
		Annotations: readOnly,
	}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var args struct{ MS int }
		json.Unmarshal(req.Params.Arguments, &args)
		timer := time.NewTimer(time.Duration(args.MS) * time.Millisecond)
		defer timer.Stop()
		select {
		case <-timer.C:
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done"}}}, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
	return s
}

// raw adds a tool whose handler sees its arguments as a map.
func raw(s *mcp.Server, tool *mcp.Tool, h func(map[string]any) *mcp.CallToolResult) {
	s.AddTool(tool, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var args map[string]any
		if err := json.Unmarshal(req.Params.Arguments, &args); err != nil {
			return nil, err
		}
		return h(args), nil
	})
}

// MCPServerEnv switches a test binary into the test MCP server over stdio
// (see ServeMCPIfAsked), so that a test can start a real server process: the
// binary itself. Its value is the mode:
//
//	"1"          NewMCPServer(2), plus crash(), which ends the process in
//	             the middle of the call
//	"misbehave"  the same, plus respond(mode), whose answer is rewritten
//	             after the SDK encoded it into something the client cannot
//	             decode (see Misbehaviours), and hang and hold (see
//	             addHoldTools)
//	"tasks"      the same, plus the tools of AddTaskTools, listed as
//	             TaskTools says
const MCPServerEnv = "SPINE_TEST_MCP_SERVER"

// MCPStderrEnv, when set, is text the stdio server writes to its standard
// error before it serves.
const MCPStderrEnv = "SPINE_TEST_MCP_STDERR"

// AddTaskTools adds long_job and maybe_job, which answer "done"; written
// through TaskTools, the server lists long_job as needing MCP tasks and
// maybe_job as allowing them.
func AddTaskTools(s *mcp.Server) {
	for _, name := range []string{"long_job", "maybe_job"} {
		raw(s, &mcp.Tool{Name: name, Description: "A job.", InputSchema: json.RawMessage(`{"type":"object"}`)},
			func(map[string]any) *mcp.CallToolResult {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done"}}}
			})
	}
}

// TaskTools returns a writer of a server's output to w that adds
// execution.taskSupport to AddTaskTools' tools as it is listed ("required"
// for long_job, "optional" for maybe_job): the SDK's Tool has no such field
// (the SDK writes one message per Write).
func TaskTools(w io.Writer) io.WriteCloser {
	return taskWriter{w}
}

type taskWriter struct{ w io.Writer }

func (t taskWriter) Write(p []byte) (int, error) {
	out := bytes.ReplaceAll(p, []byte(`"name":"long_job"`), []byte(`"execution":{"taskSupport":"required"},"name":"long_job"`))
	out = bytes.ReplaceAll(out, []byte(`"name":"maybe_job"`), []byte(`"execution":{"taskSupport":"optional"},"name":"maybe_job"`))
	if _, err := t.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (t taskWriter) Close() error {
	if c, ok := t.w.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// MCPGateEnv names a file: while it exists, the stdio server exits at once
// with status 1, so that a test can keep it down.
const MCPGateEnv = "SPINE_TEST_MCP_GATE"

// Misbehaviours maps each mode of respond to what replaces its answer's
// text. "garbage" replaces the whole message with a line that is not JSON.
var Misbehaviours = map[string][]byte{
	"nan":      []byte("NaN"),                                                   // not JSON
	"deep":     []byte(strings.Repeat("[", 20000) + strings.Repeat("]", 20000)), // deeper than a decoder goes
	"badshape": []byte("5"),                                                     // JSON, but text content must be a string
}

// ServeMCPIfAsked serves the test MCP server over stdio and exits when
// MCPServerEnv is set; otherwise it returns at once. Call it first in
// TestMain, or in an init function when TestMain would come too late.
func ServeMCPIfAsked() {
	mode := os.Getenv(MCPServerEnv)
	if mode == "" {
		return
	}
	if gate := os.Getenv(MCPGateEnv); gate != "" {
		if _, err := os.Stat(gate); err == nil {
			fmt.Fprintln(os.Stderr, "test MCP server: gate closed")
			os.Exit(1)
		}
	}
	if text := os.Getenv(MCPStderrEnv); text != "" {
		os.Stderr.WriteString(text)
	}
	server := NewMCPServer(2)
	server.AddTool(&mcp.Tool{Name: "crash", Description: "End the server's process.", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			os.Exit(3)
			return nil, nil
		})
	var transport mcp.Transport = &mcp.StdioTransport{}
	switch mode {
	case "1":
	case "misbehave":
		server.AddTool(&mcp.Tool{Name: "respond", Description: "Answer with a response the client cannot decode.", InputSchema: json.RawMessage(`{"type":"object","properties":{"mode":{"type":"string"}},"required":["mode"]}`)},
			func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				var args struct{ Mode string }
				json.Unmarshal(req.Params.Arguments, &args)
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "@@" + args.Mode + "@@"}}}, nil
			})
		addHoldTools(server)
		transport = &mcp.IOTransport{Reader: os.Stdin, Writer: misbehave{os.Stdout}}
	case "tasks":
		AddTaskTools(server)
		transport = &mcp.IOTransport{Reader: os.Stdin, Writer: TaskTools(os.Stdout)}
	default:
		fmt.Fprintf(os.Stderr, "test MCP server: unknown mode %s=%q\n", MCPServerEnv, mode)
		os.Exit(1)
	}
	if err := server.Run(context.Background(), transport); err != nil {
		fmt.Fprintln(os.Stderr, "test MCP server:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// hung, once closed, stops the misbehaving server's answers for good: its
// standard output blocks (hang).
var hung = make(chan struct{})

// addHoldTools adds the misbehaving server's tools that hold calls:
//
//	hang(path)  creates the file path, then the server sends nothing more,
//	            ever (its output blocks, as a server whose loop is stuck)
//	hold(path)  answers "open" when the file path exists; else creates it
//	            and holds the call until it is cancelled, so that a test
//	            knows the call is in flight and a second process answers it
//
// hold claims to be read-only; hang claims nothing.
func addHoldTools(s *mcp.Server) {
	path := json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`)
	pathOf := func(req *mcp.CallToolRequest) string {
		var args struct{ Path string }
		json.Unmarshal(req.Params.Arguments, &args)
		return args.Path
	}
	s.AddTool(&mcp.Tool{Name: "hang", Description: "Stop answering anything.", InputSchema: path},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			select {
			case <-hung:
			default:
				close(hung)
			}
			if err := os.WriteFile(pathOf(req), nil, 0o600); err != nil {
				return nil, err
			}
			<-ctx.Done()
			return nil, ctx.Err()
		})
	s.AddTool(&mcp.Tool{Name: "hold", Description: "Hold the call the first time.", InputSchema: path,
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			if _, err := os.Stat(pathOf(req)); err == nil {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "open"}}}, nil
			}
			if err := os.WriteFile(pathOf(req), nil, 0o600); err != nil {
				return nil, err
			}
			<-ctx.Done()
			return nil, ctx.Err()
		})
}

// misbehave is the misbehaving server's standard output: it rewrites the
// answer of respond(mode=...) as Misbehaviours says (the SDK writes one
// message per Write).
type misbehave struct{ w io.WriteCloser }

func (m misbehave) Write(p []byte) (int, error) {
	select {
	case <-hung:
		select {} // hang: never answer again
	default:
	}
	out := p
	if bytes.Contains(p, []byte(`"@@garbage@@"`)) {
		out = []byte("this is not JSON\n")
	}
	for mode, with := range Misbehaviours {
		out = bytes.ReplaceAll(out, []byte(`"@@`+mode+`@@"`), with)
	}
	if _, err := m.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (m misbehave) Close() error { return m.w.Close() }

// MCPCommand returns a command that runs this test binary as the test MCP
// server in mode (see MCPServerEnv), with env added to its environment and
// its standard error on the test's.
func MCPCommand(mode string, env ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), MCPServerEnv+"="+mode)
	cmd.Env = append(cmd.Env, env...)
	cmd.Stderr = os.Stderr
	return cmd
}

// MCPHandler serves server over streamable HTTP.
func MCPHandler(server *mcp.Server) http.Handler {
	return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil)
}

// ConnectInMemory returns a client session with server over in-memory
// transports; both ends close when the test ends.
func ConnectInMemory(tb testing.TB, server *mcp.Server) *mcp.ClientSession {
	tb.Helper()
	serverEnd, clientEnd := mcp.NewInMemoryTransports()
	ss, err := server.Connect(tb.Context(), serverEnd, nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ss.Close() })
	cs, err := NewMCPClient().Connect(tb.Context(), clientEnd, nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cs.Close() })
	return cs
}

// ConnectHTTP returns a client session with the streamable HTTP server at
// endpoint, closed when the test ends.
func ConnectHTTP(tb testing.TB, endpoint string) *mcp.ClientSession {
	tb.Helper()
	cs, err := NewMCPClient().Connect(tb.Context(), &mcp.StreamableClientTransport{Endpoint: endpoint}, nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cs.Close() })
	return cs
}

// NewMCPClient returns an MCP client named for the tests.
func NewMCPClient() *mcp.Client {
	return mcp.NewClient(&mcp.Implementation{Name: "spine-test", Version: "v0"}, nil)
}

// Text is the text of a tool result's text contents, joined.
func Text(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}
