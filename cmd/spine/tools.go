package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/spine-run/spine"
)

const toolsUsage = `usage: spine tools [--config FILE] [--demo-tools]

Prints the Python stubs of the tools a program can call: those of the MCP
servers in the config file (default $SPINE_CONFIG), and with --demo-tools the
built-in demo tools (lookup, prices.list). Paste them into a model's prompt;
help(tool) inside a program shows the same.
`

// toolsCommand is spine tools.
func toolsCommand(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("spine tools", flag.ContinueOnError)
	config := fs.String("config", os.Getenv("SPINE_CONFIG"), "")
	demo := fs.Bool("demo-tools", false, "")
	if code, done := parseFlags(fs, args, toolsUsage, stdout, stderr); done {
		return code
	}
	tools, err := loadManifest(context.Background(), *config, *demo)
	if err != nil {
		fmt.Fprintln(stderr, "spine tools:", err)
		return loadExitCode(err)
	}
	defer tools.close()
	io.WriteString(stdout, spine.Stubs(tools.manifest))
	return exitOK
}
