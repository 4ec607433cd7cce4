// Package testtools is a small MCP server for tests: a few tools that answer
// with structured content, text, several text parts, an image, an error
// result, and one that waits.
package testtools

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// NewServer returns the test server; pageSize 0 is the SDK's default, a small
// one makes tools/list paginate.
func NewServer(pageSize int) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "spine-testserver", Version: "v0"}, &mcp.ServerOptions{PageSize: pageSize})

	type addIn struct {
		A int `json:"a" jsonschema:"the first addend"`
		B int `json:"b" jsonschema:"the second addend"`
	}
	type addOut struct {
		Sum int `json:"sum"`
	}
	mcp.AddTool(s, &mcp.Tool{Name: "add", Description: "Add two integers."},
		func(ctx context.Context, req *mcp.CallToolRequest, in addIn) (*mcp.CallToolResult, addOut, error) {
			return nil, addOut{Sum: in.A + in.B}, nil
		})

	raw(s, &mcp.Tool{
		Name:        "echo",
		Description: "Repeat text.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string","description":"what to say"},"times":{"type":"integer","default":1}},"required":["text"]}`),
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
	}, func(map[string]any) *mcp.CallToolResult {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "first"}, &mcp.TextContent{Text: `{"n": 1}`}}}
	})

	raw(s, &mcp.Tool{
		Name:        "fail",
		Description: "Always fails with an error result.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"reason":{"type":"string"}}}`),
	}, func(args map[string]any) *mcp.CallToolResult {
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("failed on purpose: %v", args["reason"])}}}
	})

	raw(s, &mcp.Tool{
		Name:        "picture",
		Description: "A one-pixel image and its caption.",
		InputSchema: json.RawMessage(`{"type":"object"}`),
	}, func(map[string]any) *mcp.CallToolResult {
		return &mcp.CallToolResult{Content: []mcp.Content{
			&mcp.TextContent{Text: "a dot"},
			&mcp.ImageContent{MIMEType: "image/png", Data: []byte{0x89, 'P', 'N', 'G'}},
		}}
	})

	raw(s, &mcp.Tool{
		Name:        "get-issue",
		Title:       "Get an issue",
		Description: "Return an issue by number; the name is not a Python identifier.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"number":{"type":"integer","description":"the issue number"},"state":{"enum":["open","closed"]},"repo.name":{"type":["string","null"]}},"required":["number"]}`),
	}, func(args map[string]any) *mcp.CallToolResult {
		return &mcp.CallToolResult{StructuredContent: map[string]any{"number": args["number"], "title": "Spine crashes", "labels": []string{"bug"}}}
	})

	raw(s, &mcp.Tool{
		Name:        "getenv",
		Description: "Return an environment variable of the server process.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}`),
	}, func(args map[string]any) *mcp.CallToolResult {
		name, _ := args["name"].(string)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: os.Getenv(name)}}}
	})

	s.AddTool(&mcp.Tool{
		Name:        "slow",
		Description: "Wait ms milliseconds, or until the call is cancelled.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"ms":{"type":"integer"}},"required":["ms"]}`),
	}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var args struct{ MS int }
		json.Unmarshal(req.Params.Arguments, &args)
		select {
		case <-time.After(time.Duration(args.MS) * time.Millisecond):
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
