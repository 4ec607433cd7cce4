// Command spine runs Python programs in the Spine sandbox.
//
//	spine demo    run the seed's demo: a Go lookup tool called from Python
//	spine run     run a Python program with the tools of MCP servers
//	spine tools   print the Python stubs of those tools
//	spine serve   serve the HTTP API
//	spine mcp     serve MCP with one tool, run_python
//	spine bench   measure runs against native python3
//	spine soak    many mixed runs at once, checked, with what leaks
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

	"github.com/spine-run/spine"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `usage: spine <command>

commands:
  demo    run the seed's demo: Python multiplies a looked-up price by a quantity
  run     run a Python program with MCP servers' tools (spine run -h)
  tools   print the Python stubs of the tools a program can call (spine tools -h)
  bench   measure runs in every start mode against native python3 (spine bench -h)
  serve   serve the HTTP API: POST /v1/run, /v1/run/stream, /healthz, /metrics (spine serve -h)
  mcp     serve MCP (stdio or streamable HTTP) with one tool, run_python (spine mcp -h)
  soak    many mixed runs at once; checks every outcome and what leaks (spine soak -h)

run, tools, serve and mcp offer the tools of the MCP servers in --config; the
demo tools (lookup, prices.list) only with --demo-tools.

exit codes: 0 ok, 1 Python error, 2 usage error, 3 time-out, 4 other failure
`

// run is the whole command, testable: it returns the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "demo":
		return demo(context.Background(), stdout, stderr)
	case "run":
		return runCommand(args[1:], os.Stdin, stdout, stderr)
	case "tools":
		return toolsCommand(args[1:], stdout, stderr)
	case "bench":
		return benchCommand(args[1:], stdout, stderr)
	case "serve":
		return serveCommand(args[1:], stdout, stderr)
	case "mcp":
		return mcpCommand(args[1:], stdout, stderr)
	case "soak":
		return soakCommand(args[1:], stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "spine: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
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

func demo(ctx context.Context, stdout, stderr io.Writer) int {
	runner, err := spine.New(ctx, demoTools(), nil)
	if err != nil {
		fmt.Fprintln(stderr, "spine:", err)
		return 1
	}
	defer runner.Close(ctx)
	inputs := map[string]any{"quantity": 3}
	out, err := runner.Run(ctx, spine.Request{Source: demoSource, Inputs: inputs})
	if out != nil {
		fmt.Fprintf(stdout, "program:\n%s\ninputs: {\"quantity\": 3}\n\ncaptured output:\n%s", indent(demoSource), indent(out.Stdout))
	}
	var pyErr *spine.PythonError
	switch {
	case errors.As(err, &pyErr):
		fmt.Fprintf(stderr, "python error:\n%s", pyErr.Traceback)
		return 1
	case err != nil:
		fmt.Fprintln(stderr, "spine:", err)
		return 1
	}
	fmt.Fprintf(stdout, "\nresult: %s\n", out.Value)
	return 0
}

func indent(s string) string {
	var b []byte
	start := true
	for i := 0; i < len(s); i++ {
		if start {
			b = append(b, "    "...)
		}
		b = append(b, s[i])
		start = s[i] == '\n'
	}
	return string(b)
}

// parseFlags parses args, which must hold flags only, for a command whose
// usage text is usage. done says the command ends now, with code: exitOK after
// printing usage for -h, exitUsage after a bad flag or an argument.
func parseFlags(fs *flag.FlagSet, args []string, usage string, stdout, stderr io.Writer) (code int, done bool) {
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, usage)
			return exitOK, true
		}
		fmt.Fprintf(stderr, "%s: %v\n\n%s", fs.Name(), err, usage)
		return exitUsage, true
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "%s: unexpected argument %q\n\n%s", fs.Name(), fs.Arg(0), usage)
		return exitUsage, true
	}
	return 0, false
}
