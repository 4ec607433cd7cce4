// Package codemode gives an agent loop Spine's one tool, run_python: the model
// writes a small Python program that calls the Runner's tools, instead of one
// JSON tool call per turn ("code mode").
//
// A Tool holds everything a model-facing tool definition needs, for any LLM
// API or agent framework: its name, its description (how programs run, what
// they can and cannot do, the limits, and the Python stubs of the Runner's
// tools), the JSON Schema of its arguments and of its result. Tool.Run takes
// the arguments the model sent, as JSON, runs the program and returns a
// Result whose Text is what the model reads: the result as JSON, or the
// Python traceback (or the limit reached) followed by what the program
// printed, so the model can fix its program and call again. The images the
// program made — still PNG, JPEG, GIF and WebP files it wrote, and the image
// formats of what it displayed — are the Result's Images, which the caller
// sends after the text, in the same tool result where its API allows
// (Image says how for each API); bounded by Options.MaxImages,
// MaxImageBytes and MaxAnswerImageBytes, with what is left out said in the
// text.
//
//	tool := codemode.New(runner, nil)
//	// declare tool.Name(), tool.Description() and tool.Parameters() to the model, then
//	// for each call the model makes:
//	res, err := tool.Run(ctx, call.Arguments) // err: ctx ended or the Runner closed
//	reply(call.ID, res.Text(), res.IsError, res.Images)
//
// Package mcpserver serves the same tool over the Model Context Protocol;
// the examples module (examples/ in the repository) wires it into the
// official OpenAI and Anthropic Go SDKs.
package codemode

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/spine-run/spine"
)

// ToolName is the tool's name.
const ToolName = "run_python"

// DefaultTimeout is the default of Options.Timeout.
const DefaultTimeout = 30 * time.Second

// Options are a Tool's settings. The zero value, and a nil *Options, mean the
// defaults.
type Options struct {
	// Timeout bounds each run, and the description tells the model so.
	// Default DefaultTimeout. A shorter spine.Options.Timeout of the Runner
	// wins.
	Timeout time.Duration

	// EarlyReads runs every program with early reads on
	// (spine.Request.EarlyReads).
	EarlyReads bool

	// Sessions says that the caller runs each conversation's programs in a
	// spine.Session, so that what one program defines is there for the
	// next: the description tells the model so and the arguments have
	// "fresh", which asks for a new, empty session (the caller makes it).
	// Tool.Run runs on the Runner, without a session: a caller with
	// sessions decodes the call with Tool.Request, runs it in its session
	// and maps the outcome with Tool.Answer, as package mcpserver does.
	Sessions bool

	// StubLimit is the most bytes the tools' stubs may take in the
	// description: past it, the description lists an index instead (each
	// tool's name and its description's first line) and tells the model
	// that a program reads a tool's stub with tools.describe(name) and finds
	// tools with tools.search(words) (docs/python.md). 0 means
	// DefaultStubLimit; a negative limit, the stubs whatever their size.
	StubLimit int

	// MaxImages caps how many images the Result gives the model
	// (Result.Images: the images a program writes or displays),
	// MaxImageBytes the bytes of each (before base64) and
	// MaxAnswerImageBytes their bytes together. An image past any cap is
	// left out, and Result.ImagesLeftOut says so. 0 (or less, but for
	// MaxImageBytes) means the default: DefaultMaxImages (8),
	// DefaultMaxImageBytes (1 MiB), DefaultMaxAnswerImageBytes (4 MiB). A
	// negative MaxImageBytes gives no images at all, for a model that takes
	// none (the files are still listed).
	MaxImages           int
	MaxImageBytes       int
	MaxAnswerImageBytes int
}

// DefaultStubLimit is the default of Options.StubLimit: 16 KiB of stubs,
// about 4,000 of a model's tokens.
const DefaultStubLimit = 16 << 10

// Tool is run_python for one Runner. It is safe for concurrent use.
type Tool struct {
	runner      *spine.Runner
	opts        Options
	timeout     time.Duration // the limit a run really has
	description string
	manifest    spine.Manifest // the Runner's, for DescriptionWith
	limits      spine.Options
	input       json.RawMessage
	check       spine.Tool // checks a call's arguments against the schema (fresh always allowed)
}

// New returns run_python for runner: only the descriptions and schemas of
// its tools (Runner.Manifest) are read, for the stubs in the description.
// runner stays the caller's. opts may be nil.
func New(runner *spine.Runner, opts *Options) *Tool {
	o := withDefaults(opts)
	limits := runner.Options()
	manifest := runner.Manifest() // a copy
	t := &Tool{runner: runner, opts: o, timeout: o.Timeout, input: statelessInputSchema, manifest: manifest, limits: limits}
	if limits.Timeout > 0 && limits.Timeout < t.timeout {
		t.timeout = limits.Timeout
	}
	if o.Sessions {
		t.input = sessionInputSchema
	}
	t.description = describe(manifest, o, t.timeout, &limits)
	checked, err := spine.ValidateArguments(spine.ToolSpec{InputSchema: sessionInputSchema,
		Call: func(context.Context, json.RawMessage) (any, error) { return nil, nil }})
	if err != nil {
		panic("codemode: the input schema: " + err.Error()) // a constant of this package
	}
	t.check = checked.Call
	return t
}

func withDefaults(opts *Options) Options {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.MaxImages <= 0 {
		o.MaxImages = DefaultMaxImages
	}
	if o.MaxImageBytes == 0 {
		o.MaxImageBytes = DefaultMaxImageBytes
	}
	if o.MaxAnswerImageBytes <= 0 {
		o.MaxAnswerImageBytes = DefaultMaxAnswerImageBytes
	}
	return o
}

// Name returns ToolName.
func (t *Tool) Name() string { return ToolName }

// Description returns the tool's description for the model: how a program
// runs, what it can and cannot do, the limits, and the Python stubs of the
// tools it can call.
func (t *Tool) Description() string { return t.description }

// DescriptionWith returns the description for runs that bring tools of
// their own (spine.Request.Tools): the stubs are the Runner's tools' and
// these, each written as a Go tool's is. A tool with a name of the Runner's
// is left out (Runner.CheckTools refuses such a list).
func (t *Tool) DescriptionWith(tools spine.Manifest) string {
	if len(tools) == 0 {
		return t.description
	}
	all := maps.Clone(tools)
	maps.Copy(all, t.manifest)
	return describe(all, t.opts, t.timeout, &t.limits)
}

// Timeout returns the time limit of a run: Options.Timeout, or the Runner's
// shorter one.
func (t *Tool) Timeout() time.Duration { return t.timeout }

// InputSchema returns the JSON Schema of the tool's arguments: source, and
// the optional inputs, files and (with Options.Sessions) fresh. The caller
// may keep it; it is a copy.
func (t *Tool) InputSchema() json.RawMessage { return bytes.Clone(t.input) }

// OutputSchema returns the JSON Schema of a successful run's Result.
func (t *Tool) OutputSchema() json.RawMessage { return bytes.Clone(outputSchema) }

// Parameters returns InputSchema decoded, for the SDKs that take a tool's
// parameters as a map. It is a new map at every call.
func (t *Tool) Parameters() map[string]any {
	var m map[string]any
	if err := json.Unmarshal(t.input, &m); err != nil {
		panic("codemode: the input schema is not JSON: " + err.Error()) // a constant of this package
	}
	return m
}

// Run runs one call of the tool on the Runner: args are the arguments the
// model sent, as JSON. Every outcome the model should read is a Result —
// bad arguments, a Python error, a limit, a Guest failure included — and the
// error is non-nil only when ctx ended (the caller gave up: there is nobody
// to answer) or the Runner is closed. A Tool with Options.Sessions still
// runs on the Runner here; "fresh" is accepted and means nothing.
func (t *Tool) Run(ctx context.Context, args json.RawMessage) (*Result, error) {
	req, _, err := t.Request(args)
	if err != nil {
		return Failed(err.Error()), nil
	}
	out, err := t.runner.Run(ctx, req)
	return t.Answer(ctx, out, err)
}

// ArgumentError is a call whose arguments cannot run. Its text, which starts
// "bad arguments: ", is written for the model.
type ArgumentError struct{ Reason string }

func (e *ArgumentError) Error() string { return "bad arguments: " + e.Reason }

// args are the tool's arguments as the model sends them.
type args struct {
	Source string          `json:"source"`
	Inputs json.RawMessage `json:"inputs"`
	Files  []inputFile     `json:"files"`
	Fresh  bool            `json:"fresh"` // accepted without sessions too: every call is fresh there
}

// inputFile is an item of the "files" argument: its contents as text or as
// base64 data, not both.
type inputFile struct {
	Name string  `json:"name"`
	Text *string `json:"text"`
	Data []byte  `json:"data"`
}

// Request decodes the model's arguments into the spine.Request to run, with
// the Runner's checks of inputs and files made before any Guest is taken,
// and reports whether the model asked for a fresh session. The Request has
// the Tool's time limit (Request.Timeout) and early-read setting. An error
// is an *ArgumentError; Failed(err.Error()) is the model's answer.
func (t *Tool) Request(raw json.RawMessage) (req spine.Request, fresh bool, err error) {
	var a args
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = json.RawMessage("{}")
	}
	// The arguments are checked against the schema first, so that a mistake
	// is told in the words of a Python TypeError, as a tool's would be.
	var argErr *spine.ArgumentError
	if _, err := t.check(context.Background(), raw); errors.As(err, &argErr) {
		return req, false, &ArgumentError{ToolName + "() " + argErr.Message}
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a); err != nil || dec.More() {
		return req, false, &ArgumentError{"the arguments are not the tool's JSON object"}
	}
	if a.Source == "" {
		return req, false, &ArgumentError{`"source" is missing or empty`}
	}
	inputs, err := t.runner.CheckInputs(a.Inputs)
	if err != nil {
		return req, false, &ArgumentError{`"inputs": ` + reason(err)}
	}
	files := make([]spine.File, 0, len(a.Files))
	for _, f := range a.Files {
		data := f.Data
		switch {
		case f.Text != nil && f.Data != nil:
			return req, false, &ArgumentError{fmt.Sprintf("file %q has both text and data; give one", f.Name)}
		case f.Text != nil:
			data = []byte(*f.Text)
		}
		files = append(files, spine.File{Name: f.Name, Data: data})
	}
	if err := t.runner.CheckFiles(files); err != nil {
		return req, false, &ArgumentError{`"files": ` + reason(err)}
	}
	if len(files) == 0 {
		files = nil
	}
	return spine.Request{
		Source:     a.Source,
		Inputs:     inputs,
		EarlyReads: t.opts.EarlyReads,
		Timeout:    t.timeout,
		Files:      files,
	}, a.Fresh, nil
}

// reason is err's text without the package's prefix ("spine: bad request: ").
func reason(err error) string {
	text := err.Error()
	for _, prefix := range []string{"spine: bad request: ", "spine: too large: ", "spine: "} {
		if rest, ok := strings.CutPrefix(text, prefix); ok {
			return rest
		}
	}
	return text
}

// Answer maps a run of a Request — the Output and error of Runner.Run or
// Session.Run — to the model's Result. ctx is the caller's context, the one
// the run was given: when it has ended, nobody waits for an answer and
// Answer returns its error; a closed Runner is an error too. Every other
// outcome is a Result:
//
//   - success: Value, Stdout, Stderr, the files' names and sizes,
//     Display when the value has no JSON form, and the Images the program
//     made (within Options.MaxImages, MaxImageBytes and
//     MaxAnswerImageBytes; what is left out is said in ImagesLeftOut); Text
//     is that JSON;
//   - a Python exception: IsError, Error the traceback;
//   - the time limit: IsError, Error "TimeoutError: the program did not
//     finish within its time limit of 30s";
//   - a size limit (source, inputs, result, files) or a bad request: the
//     limit and the size;
//   - too many sessions: "busy, retry: ...";
//   - a Guest failure: "the sandbox failed: ...", which a new call may not
//     meet.
//
// The output the program printed is in the Result whenever it ran.
func (t *Tool) Answer(ctx context.Context, out *spine.Output, err error) (*Result, error) {
	res := &Result{Output: out}
	if out != nil {
		res.Stdout, res.Stderr, res.StdoutTruncated, res.StderrTruncated = out.Stdout, out.Stderr, out.StdoutTruncated, out.StderrTruncated
		res.FilesLeftOut = out.FilesLeftOut
		for _, f := range out.Files {
			res.Files = append(res.Files, FileInfo{Name: f.Name, Bytes: len(f.Data)})
		}
	}
	fail := func(text string) (*Result, error) {
		res.IsError, res.Error = true, text
		return res, nil
	}
	outcome := spine.Classify(err)
	switch {
	case outcome == spine.OutcomeOK:
		res.Value = out.Value
		if string(out.Value) == "null" && out.Display != nil {
			res.Display = out.Display.Text()
		}
		res.Images, res.ImagesLeftOut = images(out, &t.opts)
		return res, nil
	case outcome == spine.OutcomePython:
		var pyErr *spine.PythonError
		errors.As(err, &pyErr)
		text := strings.TrimRight(pyErr.Traceback, "\n")
		if text == "" {
			text = pyErr.Type + ": " + pyErr.Message
		}
		return fail(text)
	case ctx.Err() != nil:
		return nil, ctx.Err() // the caller went away or cancelled the call
	case outcome == spine.OutcomeClosed:
		return nil, err
	case outcome == spine.OutcomeTimeout:
		return fail(fmt.Sprintf("TimeoutError: the program did not finish within its time limit of %v", t.timeout))
	case outcome == spine.OutcomeTooLarge:
		return fail("limit exceeded: " + reason(err))
	case outcome == spine.OutcomeBadRequest:
		return fail((&ArgumentError{reason(err)}).Error())
	case outcome == spine.OutcomeTooManySessions:
		return fail(fmt.Sprintf("busy, retry: %s; call %s again in a moment", reason(err), ToolName))
	case outcome == spine.OutcomeSessionGone:
		return fail("the Python session is gone: " + reason(err))
	default: // the Guest failed (a trap, memory): the program may try again
		return fail("the sandbox failed: " + reason(err))
	}
}
