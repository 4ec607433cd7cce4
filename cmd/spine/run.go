package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/spine-run/spine"
)

const runUsage = `usage: spine run [flags] [FILE|-]

Runs the Python program in FILE ("-" or nothing: standard input) in the
sandbox, with the tools of the MCP servers in the config file (and the
built-in demo tools with --demo-tools). Prints the program's output, then
its value as JSON (nothing when it is None); a Python error prints the
traceback to standard error.

flags:
  --inputs JSON|@FILE   the program's inputs, a JSON object (default {})
  --early-reads         start allow-listed read-only tools early
  --timeout DURATION    time limit for the run, e.g. 5s (default none)
  --json                print one JSON object: value, stdout, stderr, error, timing
  --config FILE         MCP servers to use as tools (default $SPINE_CONFIG)
  --demo-tools          also the built-in demo tools lookup and prices.list
  --raw                 print the program's output as it is, even to a terminal

On a terminal, the control characters the program printed (escape sequences,
a lone \r, C1 controls) are shown escaped, like \x1b, instead of being obeyed;
printed to a file or a pipe, or with --raw, they are left as they are.

exit codes: 0 ok, 1 Python error, 2 usage error, 3 time-out, 4 other failure
`

// runOptions are the flags of spine run.
type runOptions struct {
	inputs     string // --inputs as given: JSON, or @FILE
	earlyReads bool
	timeout    time.Duration
	json       bool
	config     string
	demoTools  bool
	raw        bool // program output to a terminal as it is
}

func (o *runOptions) flags(fs *flag.FlagSet) {
	fs.StringVar(&o.inputs, "inputs", "", "")
	fs.BoolVar(&o.earlyReads, "early-reads", false, "")
	fs.DurationVar(&o.timeout, "timeout", 0, "")
	fs.BoolVar(&o.json, "json", false, "")
	fs.StringVar(&o.config, "config", os.Getenv("SPINE_CONFIG"), "")
	fs.BoolVar(&o.demoTools, "demo-tools", false, "")
	fs.BoolVar(&o.raw, "raw", false, "")
}

// readInputs reads --inputs: JSON text, or @FILE for the JSON in FILE. The
// value must be a JSON object.
func readInputs(arg string) (json.RawMessage, error) {
	if arg == "" {
		return json.RawMessage("{}"), nil
	}
	data := []byte(arg)
	if name, ok := strings.CutPrefix(arg, "@"); ok {
		var err error
		if data, err = os.ReadFile(name); err != nil {
			return nil, err
		}
	}
	data = bytes.TrimSpace(data)
	if !json.Valid(data) {
		return nil, errors.New("not valid JSON")
	}
	if len(data) == 0 || data[0] != '{' {
		return nil, errors.New("must be a JSON object, like {\"quantity\": 3}")
	}
	return data, nil
}

// maxSourceRead bounds how much of a program is read (the Runner's MaxSource
// default, plus one byte so that a longer one is reported as too large).
const maxSourceRead = 1<<20 + 1

func readSource(file string, stdin io.Reader) (source, filename string, err error) {
	var r io.Reader = stdin
	filename = "<stdin>"
	if file != "-" {
		f, err := os.Open(file)
		if err != nil {
			return "", "", err
		}
		defer f.Close()
		r, filename = f, file
	}
	data, err := io.ReadAll(io.LimitReader(r, maxSourceRead))
	if err != nil {
		return "", "", err
	}
	return string(data), filename, nil
}

// runResult is the object --json prints.
type runResult struct {
	Value           json.RawMessage `json:"value"`
	Stdout          string          `json:"stdout"`
	Stderr          string          `json:"stderr"`
	StdoutTruncated bool            `json:"stdout_truncated,omitempty"`
	StderrTruncated bool            `json:"stderr_truncated,omitempty"`
	Error           *runError       `json:"error"`
	ToolCalls       int             `json:"tool_calls"`
	Timing          runTiming       `json:"timing"`
	ExitCode        int             `json:"exit_code"`
}

// runError is a failed run: kind "python" (type, message, line and traceback
// from the exception), "timeout" or "failure".
type runError struct {
	Kind      string `json:"kind"`
	Type      string `json:"type,omitempty"`
	Message   string `json:"message"`
	Line      int    `json:"line,omitempty"`
	Traceback string `json:"traceback,omitempty"`
}

// runTiming is in milliseconds: setup is loading the tools and starting the
// sandbox, run is the program itself.
type runTiming struct {
	SetupMS float64 `json:"setup_ms"`
	RunMS   float64 `json:"run_ms"`
	TotalMS float64 `json:"total_ms"`
}

func runMillis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func plain(s string) string { return s }

// runCommand is spine run.
func runCommand(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	var o runOptions
	fs := flag.NewFlagSet("spine run", flag.ContinueOnError)
	o.flags(fs)
	files, code, done := parseFlags(fs, args, runUsage, -1, stdout, stderr)
	if done {
		return code
	}
	file := "-"
	switch len(files) {
	case 0:
	case 1:
		file = files[0]
	default:
		return usageError(stderr, fs.Name(), runUsage, "one program at a time, got %d: %s", len(files), strings.Join(files, " "))
	}
	if o.timeout < 0 {
		return usageError(stderr, fs.Name(), runUsage, "--timeout must not be negative")
	}
	inputs, err := readInputs(o.inputs)
	if err != nil {
		return usageError(stderr, fs.Name(), runUsage, "--inputs: %v", err)
	}
	source, filename, err := readSource(file, stdin)
	if err != nil {
		fmt.Fprintf(stderr, "spine run: %v\n", err)
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	// What the program wrote, and what came from it (a traceback, an
	// exception's message, its value), goes to a terminal neutralized.
	outText, outJSON, errText := plain, plain, plain
	if !o.raw && isTerminal(stdout) {
		outText, outJSON = terminalText, terminalJSON
	}
	if !o.raw && isTerminal(stderr) {
		errText = terminalText
	}

	start := time.Now()
	res := runResult{Value: json.RawMessage("null")}
	finish := func(code int, e *runError) int {
		res.Error, res.ExitCode = e, code
		res.Timing.TotalMS = runMillis(time.Since(start))
		if o.json {
			var b bytes.Buffer
			enc := json.NewEncoder(&b)
			enc.SetEscapeHTML(false)
			enc.SetIndent("", "  ")
			enc.Encode(res)
			io.WriteString(stdout, outJSON(b.String()))
			return code
		}
		io.WriteString(stdout, outText(res.Stdout))
		io.WriteString(stderr, errText(res.Stderr))
		if res.StdoutTruncated || res.StderrTruncated {
			fmt.Fprintln(stderr, "spine run: the program wrote more than the output limit; the rest was dropped")
		}
		switch {
		case e == nil:
			if string(res.Value) != "null" {
				if res.Stdout != "" && !strings.HasSuffix(res.Stdout, "\n") {
					io.WriteString(stdout, "\n") // the value on its own line
				}
				var b bytes.Buffer
				if json.Indent(&b, res.Value, "", "  ") != nil {
					b.Reset()
					b.Write(res.Value)
				}
				b.WriteByte('\n')
				io.WriteString(stdout, outJSON(b.String()))
			}
		case e.Kind == "python" && e.Traceback != "":
			io.WriteString(stderr, errText(e.Traceback))
			if !strings.HasSuffix(e.Traceback, "\n") {
				io.WriteString(stderr, "\n")
			}
		case e.Kind == "python":
			fmt.Fprintf(stderr, "%s: %s\n", errText(e.Type), errText(e.Message))
		default:
			fmt.Fprintf(stderr, "spine run: %s\n", errText(e.Message))
		}
		return code
	}

	tools, err := loadManifest(ctx, o.config, o.demoTools)
	if err != nil {
		return finish(loadExitCode(err), &runError{Kind: "failure", Message: err.Error()})
	}
	defer tools.close()
	runner, err := spine.New(ctx, tools.manifest, &spine.Options{PoolSize: -1})
	if err != nil {
		return finish(exitFailure, &runError{Kind: "failure", Message: err.Error()})
	}
	defer runner.Close(context.Background())
	res.Timing.SetupMS = runMillis(time.Since(start))

	began := time.Now()
	out, err := runner.Run(ctx, spine.Request{
		Source:     source,
		Filename:   filename,
		Inputs:     inputs,
		EarlyReads: o.earlyReads,
		Timeout:    o.timeout,
	})
	res.Timing.RunMS = runMillis(time.Since(began))
	if out != nil {
		res.Stdout, res.Stderr = out.Stdout, out.Stderr
		res.StdoutTruncated, res.StderrTruncated = out.StdoutTruncated, out.StderrTruncated
		res.ToolCalls = out.ToolCalls
	}
	switch outcome := spine.Classify(err); outcome {
	case spine.OutcomeOK:
		res.Value = out.Value
		return finish(exitOK, nil)
	case spine.OutcomePython:
		var pyErr *spine.PythonError
		errors.As(err, &pyErr)
		return finish(exitPython, &runError{Kind: "python", Type: pyErr.Type, Message: pyErr.Message, Line: pyErr.Line, Traceback: pyErr.Traceback})
	case spine.OutcomeTimeout:
		return finish(exitTimeout, &runError{Kind: "timeout", Message: fmt.Sprintf("the program ran over its time limit of %v", o.timeout)})
	case spine.OutcomeBadRequest:
		return finish(exitUsage, &runError{Kind: "failure", Message: err.Error()})
	case spine.OutcomeCanceled:
		if ctx.Err() != nil {
			return finish(exitFailure, &runError{Kind: "failure", Message: "interrupted"})
		}
	}
	return finish(exitFailure, &runError{Kind: "failure", Message: err.Error()})
}
