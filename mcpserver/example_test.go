package mcpserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/mcpserver"
)

// The server's one tool, run_python, runs a program with the Runner; its
// description carries the stubs of the Runner's tools. Here a client talks to
// it over in-memory transports; serve it over stdio or streamable HTTP the
// same way.
func ExampleNew() {
	ctx := context.Background()
	manifest := spine.Manifest{"lookup": {
		Call: func(ctx context.Context, args json.RawMessage) (any, error) {
			var a struct{ Key string }
			if err := json.Unmarshal(args, &a); err != nil {
				return nil, err
			}
			if a.Key != "book" {
				return nil, fmt.Errorf("no such key: %q", a.Key)
			}
			return 21, nil
		},
		Description: "Look up the price of an item by key.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"key":{"type":"string"}},"required":["key"]}`),
	}}
	runner, err := spine.New(ctx, manifest, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer runner.Close(ctx)
	server := mcpserver.New(runner, nil)

	serverEnd, clientEnd := mcp.NewInMemoryTransports()
	ss, err := server.Connect(ctx, serverEnd, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer ss.Close()
	client := mcp.NewClient(&mcp.Implementation{Name: "example", Version: "v0"}, nil)
	cs, err := client.Connect(ctx, clientEnd, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer cs.Close()

	for _, source := range []string{
		"print('pricing')\nlookup(key='book') * inputs['quantity']",
		"lookup(key='unicorn')",
	} {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: mcpserver.ToolName, Arguments: map[string]any{
			"source": source,
			"inputs": map[string]any{"quantity": 3},
		}})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("IsError %v:\n%s\n", res.IsError, res.Content[0].(*mcp.TextContent).Text)
	}
	// Output:
	// IsError false:
	// {"value":63,"stdout":"pricing\n"}
	// IsError true:
	// Traceback (most recent call last):
	//   File "<agent>", line 1, in <module>
	//     lookup(key='unicorn')
	// RuntimeError: no such key: "unicorn"
}
