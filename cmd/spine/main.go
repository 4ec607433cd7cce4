// Command spine runs Python programs in the Spine sandbox.
//
//	spine demo    run the seed's demo: a Go lookup tool called from Python
//	spine run     run a Python program with the tools of MCP servers
//	spine tools   print the Python stubs of those tools
//	spine serve   serve the HTTP API
//	spine mcp     serve MCP with one tool, run_python
//	spine bench   measure runs against native python3
//	spine soak    many mixed runs at once, checked, with what leaks
//	spine warm    fill the compilation cache ahead of time (for an image)
//	spine version the versions of spine, its Guest build and CPython
//
// run, tools, serve and mcp offer the tools of the MCP servers in their
// config file; the demo tools (lookup, prices.list) only with --demo-tools.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/internal/seed"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// Exit codes, the same for every command (each one's usage says which apply).
const (
	exitOK      = 0 // done: the program ended normally, the server stopped cleanly
	exitPython  = 1 // the program raised an uncaught Python exception
	exitUsage   = 2 // bad command line: flags, arguments, inputs, config file
	exitTimeout = 3 // the run went over --timeout
	exitFailure = 4 // anything else: an MCP server, the Guest, a limit, an interrupt
)

const usage = `usage: spine <command> [flags]

commands:
  demo    run the seed's demo: Python multiplies a looked-up price by a quantity
  run     run a Python program with MCP servers' tools (spine run -h)
  replay  run a recorded run again from its record, calling no tool (spine replay -h)
  tools   print the Python stubs of the tools a program can call (spine tools -h)
  bench   measure runs in every start mode against native python3 (spine bench -h)
  serve   serve the HTTP API: runs, streamed runs, sessions, the code-mode tool
          (/v1/tool), /healthz, /livez, /readyz and /metrics (spine serve -h)
  mcp     serve MCP (stdio or streamable HTTP) with one tool, run_python (spine mcp -h)
  soak    many mixed runs at once; checks every outcome and what leaks (spine soak -h)
  warm    fill the compilation cache ahead of time, for a container image (spine warm -h)
  version the versions of spine, its Guest build and CPython (also spine --version)

run, tools, serve and mcp offer the tools of the MCP servers in --config; the
demo tools (lookup, prices.list) only with --demo-tools.

demo, run, serve, mcp and warm take --cache-dir DIR (default $SPINE_CACHE_DIR,
else $XDG_CACHE_HOME/spine, else ~/.cache/spine), where the compiled Guest is
kept; one that cannot be written means an in-memory cache. They send spans
over OTLP when the standard OTEL_* variables ask (docs/observability.md).

Every command takes long flags (--name) and prints its usage for -h or --help.
exit codes: 0 ok, 1 Python error, 2 usage error, 3 time-out, 4 other failure
`

// commands are spine's commands by name. Each parses its arguments with
// parseFlags and returns its exit code.
var commands = map[string]func(args []string, stdin io.Reader, stdout, stderr io.Writer) int{
	"demo":    demoCommand,
	"run":     runCommand,
	"replay":  replayCommand,
	"tools":   toolsCommand,
	"bench":   benchCommand,
	"serve":   serveCommand,
	"mcp":     mcpCommand,
	"soak":    soakCommand,
	"warm":    warmCommand,
	"version": versionCommand,
}

// run is the whole command, testable: it returns the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	switch args[0] {
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	case "--version":
		args[0] = "version"
	}
	command, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "spine: unknown command %q\n\n%s", args[0], usage)
		return exitUsage
	}
	return command(args[1:], os.Stdin, stdout, stderr)
}

// parseFlags parses args, the arguments of the command fs is for, whose
// usage text is usage. Flags may come before or after the other arguments,
// and there may be at most maxArgs of those (any number when maxArgs < 0);
// parseFlags returns them. done says the command ends now, with code: exitOK
// after printing usage to stdout for -h or --help, exitUsage after printing
// what is wrong and usage to stderr for a bad flag or an argument too many.
func parseFlags(fs *flag.FlagSet, args []string, usage string, maxArgs int, stdout, stderr io.Writer) (rest []string, code int, done bool) {
	fs.SetOutput(io.Discard)
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fmt.Fprint(stdout, usage)
				return nil, exitOK, true
			}
			return nil, usageError(stderr, fs.Name(), usage, "%v", err), true
		}
		if args = fs.Args(); len(args) == 0 {
			break
		}
		rest = append(rest, args[0])
		args = args[1:]
	}
	if maxArgs >= 0 && len(rest) > maxArgs {
		return nil, usageError(stderr, fs.Name(), usage, "unexpected argument %q", rest[maxArgs]), true
	}
	return rest, 0, false
}

// usageError prints what is wrong with the command line of command name,
// then its usage, to stderr, and returns exitUsage.
func usageError(stderr io.Writer, name, usage, format string, args ...any) int {
	fmt.Fprintf(stderr, "%s: %s\n\n%s", name, fmt.Sprintf(format, args...), usage)
	return exitUsage
}

// demoSource is the seed's program: one tool call, a caught tool error, and a
// result computed from the tool's value and the run's inputs.
const demoSource = `price = lookup(key="book")
print(f"lookup(key='book') -> {price}")
try:
    lookup(key="unicorn")
except RuntimeError as err:
    print(f"lookup(key='unicorn') -> RuntimeError: {err}")
result = price * inputs["quantity"]
`

const demoUsage = `usage: spine demo

Runs the seed's demo: Python calls the Go tool lookup(key="book") (21),
catches the error of an unknown key, and multiplies the price by
inputs["quantity"] (3). Prints the program, what it printed and its result.

flags:
` + cacheUsage + `

exit codes: 0 ok, 1 Python error, 2 usage error, 4 other failure (an interrupt included)
`

// demoCommand is spine demo.
func demoCommand(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("spine demo", flag.ContinueOnError)
	var cache cacheFlags
	cache.flags(fs)
	if _, code, done := parseFlags(fs, args, demoUsage, 0, stdout, stderr); done {
		return code
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	return demo(ctx, cache.apply(nil, nil, stderr), stdout, stderr)
}

func demo(ctx context.Context, opts *spine.Options, stdout, stderr io.Writer) int {
	runner, err := spine.New(ctx, demoTools(), opts)
	if err != nil {
		fmt.Fprintln(stderr, "spine:", err)
		return exitFailure
	}
	defer runner.Close(ctx)
	inputs := map[string]any{"quantity": 3}
	out, err := runner.Run(ctx, spine.Request{Source: demoSource, Inputs: inputs})
	if out != nil {
		fmt.Fprintf(stdout, "program:\n%s\ninputs: {\"quantity\": 3}\n\ncaptured output:\n%s", seed.Indent(demoSource), seed.Indent(out.Stdout))
	}
	var pyErr *spine.PythonError
	switch {
	case errors.As(err, &pyErr):
		fmt.Fprintf(stderr, "python error:\n%s", pyErr.Traceback)
		return exitPython
	case err != nil:
		fmt.Fprintln(stderr, "spine:", err)
		return exitFailure
	}
	fmt.Fprintf(stdout, "\nresult: %s\n", out.Value)
	return exitOK
}
