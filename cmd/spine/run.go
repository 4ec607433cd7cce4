package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/door"
	"github.com/spine-run/spine/internal/atomicfile"
)

const runUsage = `usage: spine run [flags] [FILE|-]

Runs the Python program in FILE ("-" or nothing: standard input) in the
sandbox, with the tools of the MCP servers in the config file (and the
built-in demo tools with --demo-tools). Prints the program's output as it
runs, then its value as JSON (nothing when it is None); a Python error
prints the traceback to standard error.

flags:
  --inputs JSON|@FILE   the program's inputs, a JSON object (default {})
  --early-reads         start allow-listed read-only tools early
  --timeout DURATION    time limit for the run, e.g. 5s (default none)
  --json                print one JSON object: value, stdout, stderr, error, timing
  --config FILE         MCP servers to use as tools (default $SPINE_CONFIG)
  --demo-tools          also the built-in demo tools lookup and prices.list
  --verbose             also the MCP servers' standard error (else in $XDG_STATE_HOME/spine/logs, default ~/.local/state/spine/logs), and what the config left out
  --raw                 print the program's output as it is, even to a terminal
  --session FILE        run in the Python session saved in FILE (a new one when FILE does not exist) and save it back there
  --file [NAME=]PATH    place the file at PATH in the program's working directory as NAME (default: its base name); repeatable
  --out DIR             write the files the program created or changed in its working directory to DIR, and list them
  --record FILE         write the run's record to FILE (mode 0600), which spine replay runs again, calling no tool
  --guest data|DIR      the Guest to run on: the data Guest (numpy, pandas, sympy: docs/packages.md), or a folder
                        holding a Guest build's spine.wasm (with its python311.zip and packages.zip when it has them)
  --packages DIR        the program's own pure-Python packages, as site-packages holds them (compiled modules are refused)
  --preload a,b         modules to import before the program, once (with a pool, into the image runs start from)
` + cacheUsage + `
The program's working directory (/work) and /tmp are its own, in memory,
empty at the start but for the --file files, and gone after the run. With
--out DIR, the files the program created or changed there are written
under DIR (made when missing), each at its name; a file whose name would
leave DIR, pass through a symbolic link or hold a control character is
refused and listed with why, the others are written, and spine run exits 4.
Without --out, they are only listed.

On a terminal, the control characters the program printed (escape sequences,
a lone \r, C1 controls) are shown escaped, like \x1b, instead of being obeyed;
printed to a file or a pipe, or with --raw, they are left as they are.

With --session FILE, the program runs in the session saved in FILE, with the
variables, imports and functions earlier programs left there, and the
session is saved back to FILE (mode 0600) after the run, after a Python error,
a time-out or an interrupt too (the program stops with KeyboardInterrupt, as in
a notebook). A run that leaves the interpreter unusable (os._exit, a program
that will not stop) leaves FILE as it was. FILE must have been saved by spine
run with the same tools (--config, --demo-tools) and the same version of Spine.

exit codes: 0 ok, 1 Python error, 2 usage error (a --session FILE that is not
a session of these tools, --packages a folder the Guest cannot take, and a
--preload that fails to import included), 3 time-out, 4 other failure
`

// runOptions are the flags of spine run.
type runOptions struct {
	inputs     string // --inputs as given: JSON, or @FILE
	earlyReads bool
	timeout    time.Duration
	json       bool
	config     string
	demoTools  bool
	verbose    bool
	raw        bool   // program output to a terminal as it is
	session    string // --session FILE
	files      fileFlags
	out        string // --out DIR
	record     string // --record FILE
	guest      guestOptions
	cache      cacheFlags
}

// fileFlags are the --file flags, as given.
type fileFlags []string

func (f *fileFlags) String() string     { return strings.Join(*f, " ") }
func (f *fileFlags) Set(v string) error { *f = append(*f, v); return nil }

// maxFileRead bounds how much of a --file is read (the Runner's MaxFileBytes
// default, plus one byte so that a longer one is reported as too large).
const maxFileRead = 8<<20 + 1

// readFiles reads the --file flags: NAME=PATH, or PATH for a file named
// after its base name.
func readFiles(args []string) ([]spine.File, error) {
	var files []spine.File
	for _, arg := range args {
		name, path, ok := strings.Cut(arg, "=")
		if !ok {
			name, path = filepath.Base(arg), arg
		}
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		data, err := io.ReadAll(io.LimitReader(f, maxFileRead))
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		files = append(files, spine.File{Name: name, Data: data})
	}
	return files, nil
}

// writeFiles writes a run's files under dir, each at its name, and returns
// the paths written and the files refused, each with why; err is only for dir
// itself (it cannot be made or opened), when nothing is written. A name must
// be one CheckFileName allows, and no part of its path under dir may be a
// symbolic link: the files cannot land outside dir, whatever the program
// named them or dir holds. A file refused does not stop the others.
func writeFiles(dir string, files []spine.File) (written []string, refused []refusedFile, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, nil, err
	}
	defer root.Close()
	for _, f := range files {
		if err := writeOutFile(root, dir, f); err != nil {
			refused = append(refused, refusedFile{Name: f.Name, Reason: err.Error()})
			continue
		}
		written = append(written, filepath.Join(dir, filepath.FromSlash(f.Name)))
	}
	return written, refused, nil
}

// refusedFile is a file of the run that --out did not write, and why.
type refusedFile struct {
	Name   string `json:"name"`
	Reason string `json:"reason"`
}

// writeOutFile writes f under root (the folder dir), as writeFiles says.
func writeOutFile(root *os.Root, dir string, f spine.File) error {
	if err := spine.CheckFileName(f.Name); err != nil {
		return err
	}
	parts := strings.Split(f.Name, "/")
	for i := range parts {
		sub := filepath.Join(parts[:i+1]...)
		info, err := root.Lstat(sub)
		switch {
		case errors.Is(err, os.ErrNotExist) && i < len(parts)-1:
			if err := root.Mkdir(sub, 0o755); err != nil {
				return err
			}
		case errors.Is(err, os.ErrNotExist):
		case err != nil:
			return err
		case info.Mode()&os.ModeSymlink != 0:
			return fmt.Errorf("not written through the symbolic link %s", filepath.Join(dir, sub))
		}
	}
	out, err := root.OpenFile(filepath.FromSlash(f.Name), os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return err
	}
	_, err = out.Write(f.Data)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

func (o *runOptions) flags(fs *flag.FlagSet) {
	fs.StringVar(&o.inputs, "inputs", "", "")
	fs.BoolVar(&o.earlyReads, "early-reads", false, "")
	fs.DurationVar(&o.timeout, "timeout", 0, "")
	fs.BoolVar(&o.json, "json", false, "")
	fs.StringVar(&o.config, "config", os.Getenv("SPINE_CONFIG"), "")
	fs.BoolVar(&o.demoTools, "demo-tools", false, "")
	fs.BoolVar(&o.verbose, "verbose", false, "")
	fs.BoolVar(&o.raw, "raw", false, "")
	fs.StringVar(&o.session, "session", "", "")
	fs.Var(&o.files, "file", "")
	fs.StringVar(&o.out, "out", "", "")
	fs.StringVar(&o.record, "record", "", "")
	o.guest.flags(fs)
	o.cache.flags(fs)
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

// runResult is the object --json prints: the HTTP API's answer to the same
// program (door.Response), then what only spine run knows.
type runResult struct {
	door.Response
	ExitCode int           `json:"exit_code"`
	Session  *runSession   `json:"session,omitempty"`
	Recorded string        `json:"recorded,omitempty"` // where --record wrote the run's record
	Written  []string      `json:"written,omitempty"`  // where --out wrote Files, in their order
	Refused  []refusedFile `json:"refused,omitempty"`  // the Files --out did not write, and why
}

// runSession is what --json says of --session FILE.
type runSession struct {
	File     string `json:"file"`
	Restored bool   `json:"restored"`       // FILE held a session, which the program ran in
	Saved    bool   `json:"saved"`          // FILE holds the session as the program left it
	Note     string `json:"note,omitempty"` // why it was not saved
}

// kindFailure is the error kind of a failure of spine run's own, around the
// run: loading the tools, --session FILE, --out DIR. The run's own errors
// have the HTTP API's kinds (door.ErrorOf).
const kindFailure = "failure"

func runMillis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func plain(s string) string { return s }

// runCommand is spine run: it reads the command line, opens the Runner (and
// the session), runs the program, writes its files and saves its session,
// and prints what happened.
func runCommand(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	inv, code, done := parseRun(args, stdin, stdout, stderr)
	if done {
		return code
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	rep := newRunReport(inv.o, stdout, stderr)

	tools, err := loadManifest(ctx, inv.o.config, inv.o.demoTools, serverLogs{verbose: inv.o.verbose, stderr: stderr}, false)
	if err != nil {
		return rep.finish(loadExitCode(err), &door.Error{Kind: kindFailure, Message: err.Error()})
	}
	defer tools.close()
	tracer, stopTracing, err := tracing(ctx, slog.New(slog.NewTextHandler(stderr, nil)))
	if err != nil {
		return rep.finish(exitUsage, &door.Error{Kind: kindFailure, Message: err.Error()})
	}
	defer stopTracing(context.Background())
	opts := inv.o.cache.apply(&spine.Options{PoolSize: -1, TracerProvider: tracer}, nil, stderr)
	if err := inv.o.guest.apply(opts); err != nil {
		return rep.finish(exitUsage, &door.Error{Kind: kindFailure, Message: err.Error()})
	}
	runner, err := spine.New(ctx, tools.manifest, opts)
	if err != nil {
		code := exitFailure
		if errors.Is(err, spine.ErrPackages) { // --packages or --preload
			code = exitUsage
		}
		return rep.finish(code, &door.Error{Kind: kindFailure, Message: err.Error()})
	}
	defer runner.Close(context.Background())
	run := runner.Run
	var session *spine.Session
	if inv.o.session != "" {
		rep.res.Session = &runSession{File: inv.o.session}
		session, code, err = openSession(ctx, runner, inv)
		if err != nil {
			return rep.finish(code, &door.Error{Kind: kindFailure, Message: err.Error()})
		}
		rep.res.Session.Restored = inv.saved != nil
		defer session.Close(context.Background())
		run = session.Run
	}
	rep.res.Timing.SetupMS = runMillis(time.Since(rep.start))

	out, code, e := execute(ctx, run, inv, rep)
	if inv.o.out != "" && out != nil && len(out.Files) > 0 {
		code, e = rep.writeOut(inv.o.out, out.Files, code, e)
	}
	if inv.o.record != "" && out != nil && out.Record != nil {
		code, e = rep.writeRecord(inv.o.record, out.Record, code, e)
	}
	if session != nil {
		code, e = rep.save(ctx, session, inv.o.session, code, e)
	}
	return rep.finish(code, e)
}

// runInvocation is a spine run command line, read and checked.
type runInvocation struct {
	o                runOptions
	source, filename string
	inputs           json.RawMessage
	files            []spine.File // --file
	saved            []byte       // the session in --session FILE; nil for a new one
}

// parseRun reads spine run's flags, the program, its inputs, its files and
// the saved session. done reports that the command ends here, with code.
func parseRun(args []string, stdin io.Reader, stdout, stderr io.Writer) (inv runInvocation, code int, done bool) {
	o := &inv.o
	fs := flag.NewFlagSet("spine run", flag.ContinueOnError)
	o.flags(fs)
	files, code, done := parseFlags(fs, args, runUsage, -1, stdout, stderr)
	if done {
		return inv, code, true
	}
	file := "-"
	switch len(files) {
	case 0:
	case 1:
		file = files[0]
	default:
		return inv, usageError(stderr, fs.Name(), runUsage, "one program at a time, got %d: %s", len(files), strings.Join(files, " ")), true
	}
	if o.timeout < 0 {
		return inv, usageError(stderr, fs.Name(), runUsage, "--timeout must not be negative"), true
	}
	var err error
	inv.inputs, err = readInputs(o.inputs)
	if err != nil {
		return inv, usageError(stderr, fs.Name(), runUsage, "--inputs: %v", err), true
	}
	if file == "-" && isTerminal(stdin) {
		// Else a user who forgot the file sees spine wait, saying nothing.
		fmt.Fprintln(stderr, "spine run: reading the program from standard input; end it with Ctrl-D")
	}
	inv.source, inv.filename, err = readSource(file, stdin)
	if err != nil {
		fmt.Fprintf(stderr, "spine run: %v\n", err)
		return inv, exitUsage, true
	}
	inv.files, err = readFiles(o.files)
	if err != nil {
		fmt.Fprintf(stderr, "spine run: --file: %v\n", err)
		return inv, exitUsage, true
	}
	if o.session != "" {
		inv.saved, err = os.ReadFile(o.session)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			fmt.Fprintf(stderr, "spine run: --session: %v\n", err)
			return inv, exitUsage, true
		}
	}
	return inv, exitOK, false
}

// openSession restores the session saved in --session FILE, or makes a new
// one when there was none. On failure it returns the exit code and the
// message to report.
func openSession(ctx context.Context, runner *spine.Runner, inv runInvocation) (*spine.Session, int, error) {
	var (
		session *spine.Session
		err     error
	)
	if inv.saved != nil {
		session, err = runner.Restore(ctx, inv.saved)
	} else {
		session, err = runner.NewSession(ctx)
	}
	switch {
	case err == nil:
		return session, exitOK, nil
	case errors.Is(err, spine.ErrSnapshot) || errors.Is(err, spine.ErrSnapshotMismatch):
		return nil, exitUsage, fmt.Errorf("--session %s: cannot restore the session, the file is left as it is: %v", inv.o.session, err)
	case ctx.Err() != nil:
		return nil, exitFailure, errors.New("interrupted")
	}
	return nil, exitFailure, err
}

// execute runs the program with run and records its output in rep. It
// returns the Output (nil when the run did not start), the exit code and
// the error to report (nil for success).
func execute(ctx context.Context, run func(context.Context, spine.Request) (*spine.Output, error), inv runInvocation, rep *runReport) (*spine.Output, int, *door.Error) {
	res := &rep.res
	began := time.Now()
	req := spine.Request{
		Source:     inv.source,
		Filename:   inv.filename,
		Inputs:     inv.inputs,
		EarlyReads: inv.o.earlyReads,
		Timeout:    inv.o.timeout,
		Files:      inv.files,
		Record:     inv.o.record != "",
	}
	if !inv.o.json {
		req.Stdout, req.Stderr = rep.streamOut, rep.streamErr
	}
	out, err := run(ctx, req)
	res.Timing.RunMS = runMillis(time.Since(began))
	outcome := spine.Classify(err)
	res.Error = door.ErrorOf(err, inv.o.timeout)
	res.SetOutput(out)
	switch outcome {
	case spine.OutcomeOK:
		return out, exitOK, nil
	case spine.OutcomePython:
		return out, exitPython, res.Error
	case spine.OutcomeTimeout:
		return out, exitTimeout, res.Error
	case spine.OutcomeBadRequest, spine.OutcomeBadSnapshot:
		return out, exitUsage, res.Error
	case spine.OutcomeCanceled:
		if ctx.Err() != nil {
			res.Error.Message = "interrupted"
		}
	}
	// The Guest, a limit, OutcomeSessionGone, OutcomeTooManySessions.
	return out, exitFailure, res.Error
}

// writeOut writes the files the program left to --out dir and records where,
// and which it refused. A file refused, or dir failing, becomes the run's
// error when it had none, else it is printed.
func (rep *runReport) writeOut(dir string, files []spine.File, code int, e *door.Error) (int, *door.Error) {
	written, refused, err := writeFiles(dir, files)
	rep.res.Written, rep.res.Refused = written, refused
	var msg string
	switch {
	case err != nil:
		msg = fmt.Sprintf("--out: %v", err)
	case len(refused) > 0:
		msg = fmt.Sprintf("--out: %d of the %d files not written (listed below)", len(refused), len(files))
	default:
		return code, e
	}
	if e == nil {
		return exitFailure, &door.Error{Kind: kindFailure, Message: msg}
	}
	fmt.Fprintf(rep.stderr, "%s: %s\n", rep.name, rep.errText(msg))
	return code, e
}

// writeRecord writes the run's record to file (--record), readable by the
// owner only: it holds the program's inputs and its tools' results. A record
// that cannot be written fails a run that went well.
func (rep *runReport) writeRecord(file string, rec *spine.Record, code int, e *door.Error) (int, *door.Error) {
	data, err := rec.Encode()
	if err == nil { // a temporary file, 0600, renamed into place
		err = atomicfile.Write(file, data, atomicfile.Options{})
	}
	msg := ""
	switch {
	case err != nil:
		msg = fmt.Sprintf("--record: %v", err)
	case rec.Incomplete != "":
		msg = fmt.Sprintf("--record: %s is incomplete, and cannot be replayed: %s", file, rec.Incomplete)
	default:
		rep.res.Recorded = file
		return code, e
	}
	if e == nil && err != nil {
		return exitFailure, &door.Error{Kind: kindFailure, Message: msg}
	}
	fmt.Fprintf(rep.stderr, "%s: %s\n", rep.name, rep.errText(msg))
	return code, e
}

// save saves the session back to file after the run. A program stopped by
// its time limit or an interrupt got KeyboardInterrupt and left the session
// whole, as in a notebook: it is saved like any other; only a session the
// run lost is not. A run that went well but whose session could not be
// saved fails.
func (rep *runReport) save(ctx context.Context, session *spine.Session, file string, code int, e *door.Error) (int, *door.Error) {
	if err := saveSession(context.WithoutCancel(ctx), session, file); err != nil {
		rep.res.Session.Note = err.Error()
		if code == exitOK { // the program ran, but its session is not where it was asked to be
			return exitFailure, &door.Error{Kind: kindFailure, Message: err.Error()}
		}
		return code, e
	}
	rep.res.Session.Saved = true
	return code, e
}

// runReport is what spine run prints: the program's output as it runs
// (without --json), then the result, as text or as one JSON object.
type runReport struct {
	name                 string // the command, which its messages start with
	json                 bool
	stdout, stderr       io.Writer
	outText, outJSON     func(string) string // what goes to stdout, neutralized on a terminal
	errText              func(string) string // what goes to stderr, likewise
	streamOut, streamErr *streamWriter
	start                time.Time
	res                  runResult
}

func newRunReport(o runOptions, stdout, stderr io.Writer) *runReport {
	// What the program wrote, and what came from it (a traceback, an
	// exception's message, its value), goes to a terminal neutralized.
	rep := &runReport{name: "spine run", json: o.json, stdout: stdout, stderr: stderr, outText: plain, outJSON: plain, errText: plain}
	if !o.raw && isTerminal(stdout) {
		rep.outText, rep.outJSON = terminalText, terminalJSON
	}
	if !o.raw && isTerminal(stderr) {
		rep.errText = terminalText
	}
	// Without --json, the program's output is printed as it runs.
	rep.streamOut, rep.streamErr = newStreamWriter(stdout, rep.outText), newStreamWriter(stderr, rep.errText)
	rep.start = time.Now()
	rep.res.Value = json.RawMessage("null")
	return rep
}

// finish prints the result of a run that ended with exit code code and error
// e (nil for success), and returns code.
func (rep *runReport) finish(code int, e *door.Error) int {
	res := &rep.res
	stdout, stderr, errText := rep.stdout, rep.stderr, rep.errText
	res.Error, res.ExitCode = e, code
	res.Timing.TotalMS = runMillis(time.Since(rep.start))
	if rep.json {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		enc.SetIndent("", "  ")
		enc.Encode(res)
		io.WriteString(stdout, rep.outJSON(b.String()))
		return code
	}
	// The program's output was printed as it ran.
	lineEnded := rep.streamOut.flush()
	rep.streamErr.flush()
	switch {
	case e == nil:
		switch {
		case string(res.Value) != "null":
			if !lineEnded {
				io.WriteString(stdout, "\n") // the value on its own line
			}
			var b bytes.Buffer
			if json.Indent(&b, res.Value, "", "  ") != nil {
				b.Reset()
				b.Write(res.Value)
			}
			b.WriteByte('\n')
			io.WriteString(stdout, rep.outJSON(b.String()))
		case res.Display != nil:
			// A value without a JSON form: as a notebook's Out[ ] shows it.
			if !lineEnded {
				io.WriteString(stdout, "\n")
			}
			text := res.Display.Text()
			if !strings.HasSuffix(text, "\n") {
				text += "\n"
			}
			io.WriteString(stdout, rep.outText(text))
		}
	case e.Kind == "python" && e.Traceback != "":
		io.WriteString(stderr, errText(e.Traceback))
		if !strings.HasSuffix(e.Traceback, "\n") {
			io.WriteString(stderr, "\n")
		}
	case e.Kind == "python":
		fmt.Fprintf(stderr, "%s: %s\n", errText(e.Type), errText(e.Message))
	default:
		fmt.Fprintf(stderr, "%s: %s\n", rep.name, errText(e.Message))
	}
	if res.Session != nil && res.Session.Note != "" {
		fmt.Fprintf(stderr, "%s: %s\n", rep.name, res.Session.Note)
	}
	written, refused := res.Written, res.Refused
	for _, f := range res.Files {
		switch {
		case len(refused) > 0 && refused[0].Name == f.Name:
			fmt.Fprintf(stderr, "%s: not written: %s: %s\n", rep.name, errText(f.Name), errText(refused[0].Reason))
			refused = refused[1:]
		case len(written) > 0:
			fmt.Fprintf(stderr, "%s: wrote %s (%d bytes)\n", rep.name, errText(written[0]), len(f.Data))
			written = written[1:]
		default:
			fmt.Fprintf(stderr, "%s: the program left %s (%d bytes); --out DIR writes it\n", rep.name, errText(f.Name), len(f.Data))
		}
	}
	if res.FilesLeftOut > 0 {
		fmt.Fprintf(stderr, "%s: %d more files left out, past the limit on files\n", rep.name, res.FilesLeftOut)
	}
	return code
}

// saveSession writes the session's state to file, through a temporary file
// in the same folder, readable by the owner only, renamed into place. A
// session that the run lost (os._exit, a stack overflow, a program that would
// not stop) leaves file as it is.
func saveSession(ctx context.Context, s *spine.Session, file string) error {
	blob, err := s.Snapshot(ctx)
	switch {
	case errors.Is(err, spine.ErrSessionLost):
		return fmt.Errorf("the run left the interpreter unusable (os._exit, a stack overflow, a program that would not stop), so the session was lost: %s keeps its state from before the run", file)
	case err != nil:
		return fmt.Errorf("the session could not be saved (%v): %s keeps its state from before the run", err, file)
	}
	err = atomicfile.Write(file, blob, atomicfile.Options{Sync: true})
	if err != nil {
		return fmt.Errorf("the session could not be saved: %v; %s keeps its state from before the run", err, file)
	}
	return nil
}
