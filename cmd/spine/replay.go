package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/door"
)

const replayUsage = `usage: spine replay [flags] FILE

Runs the program of a recorded run again, from its record in FILE (written by
spine run --record, or a run's "record" over HTTP): each tool call gets the
result it got then (no tool is called, no MCP server started), each clock
read and random byte is the recorded one, and a sleep does not wait. The
program's output, value and files are the recorded run's, byte for byte, and
are printed as spine run prints them.

When the program asks for something else than the record holds (another
tool, other arguments, another order, more clock reads or random bytes) the
replay stops there and names the first difference; a record of another
Guest build is refused the same way.

flags:
  --trace               print each call, as the replay answers it, with its timing in the recorded run, to standard error
  --json                print one JSON object: value, stdout, stderr, error, timing
  --raw                 print the program's output as it is, even to a terminal
  --out DIR             write the files the program created or changed in its working directory to DIR, and list them
  --guest data|DIR      the Guest the run ran on, as spine run's --guest
  --packages DIR        the program's own packages the run had, as spine run's --packages
  --preload a,b         the modules the run preloaded, as spine run's --preload
` + cacheUsage + `
exit codes: 0 ok, 1 Python error (the recorded run's), 2 usage error (FILE
not a record), 4 other failure (a replay that diverged from its record, or
another Guest)
`

// replayOptions are the flags of spine replay.
type replayOptions struct {
	trace bool
	json  bool
	raw   bool
	out   string
	guest guestOptions
	cache cacheFlags
}

func (o *replayOptions) flags(fs *flag.FlagSet) {
	fs.BoolVar(&o.trace, "trace", false, "")
	fs.BoolVar(&o.json, "json", false, "")
	fs.BoolVar(&o.raw, "raw", false, "")
	fs.StringVar(&o.out, "out", "", "")
	o.guest.flags(fs)
	o.cache.flags(fs)
}

// replayCommand is spine replay: it reads the record, makes a Runner with
// the record's tools (whose calls a replay never makes), replays it and
// prints what happened.
func replayCommand(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	var o replayOptions
	fs := flag.NewFlagSet("spine replay", flag.ContinueOnError)
	o.flags(fs)
	files, code, done := parseFlags(fs, args, replayUsage, 1, stdout, stderr)
	if done {
		return code
	}
	if len(files) != 1 {
		return usageError(stderr, fs.Name(), replayUsage, "the record's FILE is missing")
	}
	data, err := os.ReadFile(files[0])
	if err != nil {
		fmt.Fprintf(stderr, "spine replay: %v\n", err)
		return exitUsage
	}
	rec, err := spine.ParseRecord(data)
	if err != nil {
		fmt.Fprintf(stderr, "spine replay: %s: %v\n", files[0], err)
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	rep := newRunReport(runOptions{json: o.json, raw: o.raw}, stdout, stderr)
	rep.name = "spine replay"
	opts := o.cache.apply(&spine.Options{PoolSize: -1}, nil, stderr)
	if err := o.guest.apply(opts); err != nil {
		return rep.finish(exitUsage, &door.Error{Kind: kindFailure, Message: err.Error()})
	}
	runner, err := spine.New(ctx, rec.Manifest(), opts)
	if err != nil {
		code := exitFailure
		if errors.Is(err, spine.ErrPackages) {
			code = exitUsage
		}
		return rep.finish(code, &door.Error{Kind: kindFailure, Message: err.Error()})
	}
	defer runner.Close(context.Background())
	rep.res.Timing.SetupMS = runMillis(time.Since(rep.start))

	out, code, e := replay(ctx, runner, rec, o, rep)
	if o.out != "" && out != nil && len(out.Files) > 0 {
		code, e = rep.writeOut(o.out, out.Files, code, e)
	}
	return rep.finish(code, e)
}

// replay replays rec on runner, printing each call with --trace, and
// records the output in rep. It returns the Output (nil when the replay did
// not start), the exit code and the error to report (nil for success).
func replay(ctx context.Context, runner *spine.Runner, rec *spine.Record, o replayOptions, rep *runReport) (*spine.Output, int, *door.Error) {
	ro := &spine.ReplayOptions{}
	if !o.json {
		ro.Stdout, ro.Stderr = rep.streamOut, rep.streamErr
	}
	if o.trace {
		ro.Trace = func(c spine.ReplayedCall) {
			state := "ok"
			if c.Failed() {
				state = "error"
			}
			how := ""
			if c.Early {
				how = ", an early read"
			}
			fmt.Fprintf(rep.stderr, "spine replay: call %d %s at %.1f ms, took %.1f ms%s: %s\n", c.N,
				rep.errText(showArgs(c.Tool, string(c.Args))), runMillis(c.Start), runMillis(c.Duration), how, state)
		}
	}
	began := time.Now()
	out, err := runner.Replay(ctx, rec, ro)
	res := &rep.res
	res.Timing.RunMS = runMillis(time.Since(began))
	res.Error = door.ErrorOf(err, 0)
	res.SetOutput(out)
	switch outcome := spine.Classify(err); {
	case outcome == spine.OutcomeOK:
		return out, exitOK, nil
	case outcome == spine.OutcomePython:
		return out, exitPython, res.Error
	case errors.Is(err, spine.ErrDiverged):
		res.Error.Kind = "diverged"
	case outcome == spine.OutcomeBadRequest:
		return out, exitUsage, res.Error
	case outcome == spine.OutcomeCanceled && ctx.Err() != nil:
		res.Error.Message = "interrupted"
	}
	return out, exitFailure, res.Error
}

// showArgs is a call as --trace prints it: tool(args), args cut short.
func showArgs(tool, args string) string {
	const max = 120
	if len(args) > max {
		args = args[:max] + "…"
	}
	return tool + "(" + args + ")"
}
