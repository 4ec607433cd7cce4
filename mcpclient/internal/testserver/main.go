// Command testserver is the test MCP server of package spinetest over stdio,
// for trying a config file by hand.
package main

import (
	"context"
	"log"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spine-run/spine/internal/spinetest"
)

func main() {
	if err := spinetest.NewMCPServer(2).Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		log.Fatal(err)
	}
}
