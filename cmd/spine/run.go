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
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spine-run/spine"
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
` + cacheUsage + `
The program's working directory (/work) and /tmp are its own, in memory,
empty at the start but for the --file files, and gone after the run. With
--out DIR, the files the program created or changed there are written
under DIR (made when missing), each at its name; a name that would leave
DIR, or pass through a symbolic link, is refused. Without --out, they are
only listed.

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
a session of these tools included), 3 time-out, 4 other failure
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
// the paths written. A name must be one CheckFileName allows, and no part of
// its path under dir may be a symbolic link: the files cannot land outside
// dir, whatever the program named them or dir holds.
func writeFiles(dir string, files []spine.File) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	var written []string
	for _, f := range files {
		if err := spine.CheckFileName(f.Name); err != nil {
			return written, err
		}
		parts := strings.Split(f.Name, "/")
		for i := range parts {
			sub := filepath.Join(parts[:i+1]...)
			info, err := root.Lstat(sub)
			switch {
			case errors.Is(err, os.ErrNotExist) && i < len(parts)-1:
				if err := root.Mkdir(sub, 0o755); err != nil {
					return written, err
				}
			case errors.Is(err, os.ErrNotExist):
			case err != nil:
				return written, err
			case info.Mode()&os.ModeSymlink != 0:
				return written, fmt.Errorf("%s: not written through the symbolic link %s", f.Name, filepath.Join(dir, sub))
			}
		}
		out, err := root.OpenFile(filepath.FromSlash(f.Name), os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW, 0o644)
		if err != nil {
			return written, err
		}
		_, err = out.Write(f.Data)
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return written, err
		}
		written = append(written, filepath.Join(dir, filepath.FromSlash(f.Name)))
	}
	return written, nil
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

// runResult is the object --json prints.
type runResult struct {
	Value           json.RawMessage  `json:"value"`
	Stdout          string           `json:"stdout"`
	Stderr          string           `json:"stderr"`
	StdoutTruncated bool             `json:"stdout_truncated,omitempty"`
	StderrTruncated bool             `json:"stderr_truncated,omitempty"`
	Error           *runError        `json:"error"`
	ToolCalls       int              `json:"tool_calls"`
	Calls           []spine.ToolCall `json:"calls,omitempty"` // each call the program made
	Timing          runTiming        `json:"timing"`
	ExitCode        int              `json:"exit_code"`
	Session         *runSession      `json:"session,omitempty"`
	Files           []runFile        `json:"files,omitempty"`
	FilesLeftOut    int              `json:"files_left_out,omitempty"`
}

// runFile is what --json says of a file the program left: its name, size,
// and where --out wrote it.
type runFile struct {
	Name  string `json:"name"`
	Bytes int    `json:"bytes"`
	Path  string `json:"path,omitempty"`
}

// runSession is what --json says of --session FILE.
type runSession struct {
	File     string `json:"file"`
	Restored bool   `json:"restored"`       // FILE held a session, which the program ran in
	Saved    bool   `json:"saved"`          // FILE holds the session as the program left it
	Note     string `json:"note,omitempty"` // why it was not saved
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
	inFiles, err := readFiles(o.files)
	if err != nil {
		fmt.Fprintf(stderr, "spine run: --file: %v\n", err)
		return exitUsage
	}
	var saved []byte // the session in --session FILE; nil for a new one
	if o.session != "" {
		saved, err = os.ReadFile(o.session)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			fmt.Fprintf(stderr, "spine run: --session: %v\n", err)
			return exitUsage
		}
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

	// Without --json, the program's output is printed as it runs.
	streamOut, streamErr := newStreamWriter(stdout, outText), newStreamWriter(stderr, errText)

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
		// The program's output was printed as it ran.
		lineEnded := streamOut.flush()
		streamErr.flush()
		switch {
		case e == nil:
			if string(res.Value) != "null" {
				if !lineEnded {
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
		if res.Session != nil && res.Session.Note != "" {
			fmt.Fprintf(stderr, "spine run: %s\n", res.Session.Note)
		}
		for _, f := range res.Files {
			if f.Path != "" {
				fmt.Fprintf(stderr, "spine run: wrote %s (%d bytes)\n", errText(f.Path), f.Bytes)
			} else {
				fmt.Fprintf(stderr, "spine run: the program left %s (%d bytes); --out DIR writes it\n", errText(f.Name), f.Bytes)
			}
		}
		if res.FilesLeftOut > 0 {
			fmt.Fprintf(stderr, "spine run: %d more files left out, past the limit on files\n", res.FilesLeftOut)
		}
		return code
	}

	tools, err := loadManifest(ctx, o.config, o.demoTools, serverLogs{o.verbose, stderr})
	if err != nil {
		return finish(loadExitCode(err), &runError{Kind: "failure", Message: err.Error()})
	}
	defer tools.close()
	tracer, stopTracing, err := tracing(ctx)
	if err != nil {
		return finish(exitUsage, &runError{Kind: "failure", Message: err.Error()})
	}
	defer stopTracing(context.Background())
	runner, err := spine.New(ctx, tools.manifest, o.cache.apply(&spine.Options{PoolSize: -1, TracerProvider: tracer}, nil, stderr))
	if err != nil {
		return finish(exitFailure, &runError{Kind: "failure", Message: err.Error()})
	}
	defer runner.Close(context.Background())
	run := runner.Run
	var session *spine.Session
	if o.session != "" {
		res.Session = &runSession{File: o.session}
		if saved != nil {
			session, err = runner.Restore(ctx, saved)
			res.Session.Restored = err == nil
		} else {
			session, err = runner.NewSession(ctx)
		}
		if err != nil {
			if errors.Is(err, spine.ErrSnapshot) || errors.Is(err, spine.ErrSnapshotMismatch) {
				return finish(exitUsage, &runError{Kind: "failure", Message: fmt.Sprintf("--session %s: cannot restore the session, the file is left as it is: %v", o.session, err)})
			}
			if ctx.Err() != nil {
				return finish(exitFailure, &runError{Kind: "failure", Message: "interrupted"})
			}
			return finish(exitFailure, &runError{Kind: "failure", Message: err.Error()})
		}
		defer session.Close(context.Background())
		run = session.Run
	}
	res.Timing.SetupMS = runMillis(time.Since(start))

	began := time.Now()
	req := spine.Request{
		Source:     source,
		Filename:   filename,
		Inputs:     inputs,
		EarlyReads: o.earlyReads,
		Timeout:    o.timeout,
		Files:      inFiles,
	}
	if !o.json {
		req.Stdout, req.Stderr = streamOut, streamErr
	}
	out, err := run(ctx, req)
	res.Timing.RunMS = runMillis(time.Since(began))
	if out != nil {
		res.Stdout, res.Stderr = out.Stdout, out.Stderr
		res.StdoutTruncated, res.StderrTruncated = out.StdoutTruncated, out.StderrTruncated
		res.ToolCalls = out.ToolCalls
		res.Calls = out.Calls
		res.FilesLeftOut = out.FilesLeftOut
		for _, f := range out.Files {
			res.Files = append(res.Files, runFile{Name: f.Name, Bytes: len(f.Data)})
		}
	}
	code, e := exitOK, (*runError)(nil)
	outcome := spine.Classify(err)
	switch outcome {
	case spine.OutcomeOK:
		res.Value = out.Value
	case spine.OutcomePython:
		var pyErr *spine.PythonError
		errors.As(err, &pyErr)
		code, e = exitPython, &runError{Kind: "python", Type: pyErr.Type, Message: pyErr.Message, Line: pyErr.Line, Traceback: pyErr.Traceback}
	case spine.OutcomeTimeout:
		code, e = exitTimeout, &runError{Kind: "timeout", Message: fmt.Sprintf("the program ran over its time limit of %v", o.timeout)}
	case spine.OutcomeBadRequest, spine.OutcomeBadSnapshot:
		code, e = exitUsage, &runError{Kind: "failure", Message: err.Error()}
	case spine.OutcomeCanceled:
		if ctx.Err() != nil {
			code, e = exitFailure, &runError{Kind: "failure", Message: "interrupted"}
			break
		}
		fallthrough
	default: // the Guest, a limit, OutcomeSessionGone, OutcomeTooManySessions
		code, e = exitFailure, &runError{Kind: "failure", Message: err.Error()}
	}
	if o.out != "" && out != nil && len(out.Files) > 0 {
		written, err := writeFiles(o.out, out.Files)
		for i, path := range written {
			res.Files[i].Path = path
		}
		if err != nil {
			msg := fmt.Sprintf("--out: %v", err)
			if e == nil {
				code, e = exitFailure, &runError{Kind: "failure", Message: msg}
			} else {
				fmt.Fprintf(stderr, "spine run: %s\n", errText(msg))
			}
		}
	}
	if session != nil {
		// A program stopped by its time limit or an interrupt got
		// KeyboardInterrupt and left the session whole, as in a notebook:
		// it is saved like any other; only a session the run lost is not.
		if err := saveSession(context.WithoutCancel(ctx), session, o.session); err != nil {
			res.Session.Note = err.Error()
			if code == exitOK { // the program ran, but its session is not where it was asked to be
				code, e = exitFailure, &runError{Kind: "failure", Message: err.Error()}
			}
		} else {
			res.Session.Saved = true
		}
	}
	return finish(code, e)
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
	tmp, err := os.CreateTemp(filepath.Dir(file), "."+filepath.Base(file)+".*.tmp")
	if err == nil {
		defer os.Remove(tmp.Name()) // nothing left to remove once renamed
		_, err = tmp.Write(blob)
		if err == nil {
			err = tmp.Sync()
		}
		if cerr := tmp.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Rename(tmp.Name(), file)
		}
	}
	if err != nil {
		return fmt.Errorf("the session could not be saved: %v; %s keeps its state from before the run", err, file)
	}
	return nil
}
