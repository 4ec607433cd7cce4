package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/spine-run/spine"
)

const toolsUsage = `usage: spine tools [--config FILE]

Prints the Python stubs of the tools a program can call: the built-in demo
tools and those of the MCP servers in the config file (default $SPINE_CONFIG).
Paste them into a model's prompt; help(tool) inside a program shows the same.
`

// toolsCommand is spine tools.
func toolsCommand(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("spine tools", flag.ContinueOnError)
	config := fs.String("config", os.Getenv("SPINE_CONFIG"), "")
	if code, done := parseFlags(fs, args, toolsUsage, stdout, stderr); done {
		return code
	}
	manifest, closeTools, err := loadManifest(context.Background(), *config)
	if err != nil {
		fmt.Fprintln(stderr, "spine tools:", err)
		if errors.Is(err, errConfig) {
			return exitUsage
		}
		return exitFailure
	}
	defer closeTools()
	io.WriteString(stdout, spine.Stubs(manifest))
	return exitOK
}
