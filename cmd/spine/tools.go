package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/spine-run/spine"
)

const toolsUsage = `usage: spine tools [--config FILE] [--demo-tools] [--verbose]

Prints the Python stubs of the tools a program can call: those of the MCP
servers in the config file (default $SPINE_CONFIG), and with --demo-tools the
built-in demo tools (lookup, prices.list). Paste them into a model's prompt;
help(tool) inside a program shows the same.

flags:
  --config FILE  MCP servers to use as tools (default $SPINE_CONFIG)
  --demo-tools   also the built-in demo tools lookup and prices.list
  --verbose      also the MCP servers' standard error, and what the config
                 left out (keys ignored, tools that need MCP tasks)

The MCP servers' standard error goes to NAMESPACE.log in
$XDG_STATE_HOME/spine/logs (default ~/.local/state/spine/logs).

exit codes: 0 ok, 2 usage error (a bad config file included), 4 an MCP server failed
`

// toolsOptions are the flags of spine tools.
type toolsOptions struct {
	config  string
	demo    bool
	verbose bool
}

func (o *toolsOptions) flags(fs *flag.FlagSet) {
	fs.StringVar(&o.config, "config", os.Getenv("SPINE_CONFIG"), "")
	fs.BoolVar(&o.demo, "demo-tools", false, "")
	fs.BoolVar(&o.verbose, "verbose", false, "")
}

// toolsCommand is spine tools.
func toolsCommand(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	var o toolsOptions
	fs := flag.NewFlagSet("spine tools", flag.ContinueOnError)
	o.flags(fs)
	if _, code, done := parseFlags(fs, args, toolsUsage, 0, stdout, stderr); done {
		return code
	}
	tools, err := loadManifest(context.Background(), o.config, o.demo, serverLogs{verbose: o.verbose, stderr: stderr}, false)
	if err != nil {
		fmt.Fprintln(stderr, "spine tools:", err)
		return loadExitCode(err)
	}
	defer tools.close()
	io.WriteString(stdout, spine.Stubs(tools.manifest))
	return exitOK
}
