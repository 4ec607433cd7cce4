// Command testserver is the MCP server of package testtools over stdio, for
// tests that need a real server process.
package main

import (
	"context"
	"log"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spine-run/spine/mcpclient/internal/testtools"
)

func main() {
	if err := testtools.NewServer(2).Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		log.Fatal(err)
	}
}
