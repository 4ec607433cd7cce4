// Package mcpserver offers a spine.Runner to LLM clients as a Model Context
// Protocol server with one tool, run_python(source, inputs, files, fresh): code mode
// for any MCP client. The tool's description carries the Python stubs of the
// Runner's tools (spine.Stubs), so the model knows what it can call from its
// program.
//
// Each MCP session (each connection over stdio or in memory, each
// Mcp-Session-Id over streamable HTTP) has its own spine.Session, made on its
// first run_python call: the variables, imports and functions one program
// defines are there for the client's next program, as in a notebook, and no
// other client sees them. fresh=true starts the client afresh. A program
// stopped by its time limit or a cancellation gets KeyboardInterrupt and the
// session keeps its state; a session lost to a program that would not stop,
// or to a crash, is replaced by a new one on the client's next call, whose
// result says that the state was lost. The spine.Session ends with its MCP session
// (mcp.ServerSession.Wait returns), and at most Options.MaxSessions are kept:
// past it, the least recently used one is closed, and its client is told on
// its next call. Options.Stateless runs every call on a clean Guest instead.
// (An HTTP client that goes away without ending its MCP session keeps it until
// the handler's SessionTimeout, if any: MaxSessions bounds what such sessions
// hold.)
//
// Sessions need MCP sessions that last from call to call. Over stdio and in
// memory the connection is one, whatever the protocol version; over
// streamable HTTP, the SDK's default handler keeps them (Mcp-Session-Id). With
// StreamableHTTPOptions.Stateless (and in the sessionless protocol of
// 2026-07-28, which the SDK serves only that way) every request is an MCP
// session of its own: set Options.Stateless there too.
//
// The Server New returns is the official Go SDK's; serve it over any of its
// transports:
//
//	server := mcpserver.New(runner, manifest, nil)
//	err := server.Run(ctx, &mcp.StdioTransport{})                    // stdio
//	handler := mcp.NewStreamableHTTPHandler(                          // streamable HTTP
//		func(*http.Request) *mcp.Server { return server }, nil)
//
// A successful run answers with structuredContent {"value", "stdout",
// "stderr", "files"} — headed by "notice" when the state of earlier calls was
// lost — and the same JSON as text. Files the program created or changed in
// its working directory follow as embedded resources (file:///work/NAME;
// text when UTF-8, else a base64 blob), after the error's text too when a
// run fails; "files" in structuredContent lists their names and sizes. The
// files of the "files" argument are placed in the working directory first.
// Files belong to one call, in a session too. A program that fails — a Python
// exception, its time limit, a limit on its size — answers with a tool result
// whose IsError is set and whose text is the traceback (or the reason) and the
// program's output, so the model can read it and try again; only a client that
// went away or a closed Runner make a protocol error.
//
// The server runs at most Options.Slots programs at once. A call that finds
// every slot busy is answered at once with the tool error "busy, retry: …"
// rather than queued: queued calls would pile up without bound behind slow
// programs, while the model (or its client) can simply call again. The calls
// of one client run one at a time, in its session; a call waiting for the
// client's previous one to end holds its slot, and its time limit starts when
// its program does.
package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net/url"
	"path"
	"runtime"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spine-run/spine"
)

// ToolName is the name of the server's one tool.
const ToolName = "run_python"

// Options are the server's settings. The zero value, and a nil *Options, mean
// the defaults; a zero field means that field's default.
type Options struct {
	// Name and Version identify the server to clients. Defaults "spine" and "dev".
	Name    string
	Version string

	// Timeout bounds each run. Default 30 s.
	Timeout time.Duration

	// Slots is how many run_python calls run at once; a call past it gets
	// the tool error "busy, retry: …" at once. Default: the Runner's pool
	// size, else runtime.GOMAXPROCS(0).
	Slots int

	// EarlyReads runs every program with early reads on (Request.EarlyReads):
	// tools marked AllowEarlyRead start before the program reaches them.
	EarlyReads bool

	// Stateless runs every call on a clean Guest from the Runner's pool,
	// as Runner.Run does: nothing persists from one call to the next, and
	// run_python has no fresh argument. By default each MCP session keeps
	// a spine.Session (see the package's documentation).
	Stateless bool

	// MaxSessions caps the spine.Sessions the server keeps, one per MCP
	// session that has called run_python. A client past it takes the place
	// of the session used least recently that is not running, which is
	// closed; its client's next call runs in a new session and is told so.
	// Default DefaultMaxSessions.
	MaxSessions int

	// Logger is given to the SDK's server. nil means no logging.
	Logger *slog.Logger
}

// DefaultTimeout is the default of Options.Timeout.
const DefaultTimeout = 30 * time.Second

// DefaultMaxSessions is the default of Options.MaxSessions.
const DefaultMaxSessions = 100

// withDefaults returns a copy of opts (nil allowed) with every zero field set.
func withDefaults(runner *spine.Runner, opts *Options) Options {
	o := Options{}
	if opts != nil {
		o = *opts
	}
	if o.Name == "" {
		o.Name = "spine"
	}
	if o.Version == "" {
		o.Version = "dev"
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Slots <= 0 && runner != nil {
		o.Slots = runner.Stats().PoolSize
	}
	if o.Slots <= 0 {
		o.Slots = runtime.GOMAXPROCS(0)
	}
	if o.MaxSessions <= 0 {
		o.MaxSessions = DefaultMaxSessions
	}
	return o
}

// New returns an MCP server whose tool run_python runs programs with runner.
// manifest is the Runner's manifest: only its descriptions and schemas are
// used, for the stubs in the tool's description. runner stays the caller's:
// close it when the server is done. opts may be nil.
func New(runner *spine.Runner, manifest spine.Manifest, opts *Options) *mcp.Server {
	o := withDefaults(runner, opts)
	instructions := "Call " + ToolName + " with a Python program that uses the tools listed in its description; " +
		"one program can make many tool calls and combine their results."
	if !o.Stateless {
		instructions += " Variables, imports and functions persist from one call to the next."
	}
	server := mcp.NewServer(&mcp.Implementation{Name: o.Name, Title: "Spine: sandboxed Python with tools", Version: o.Version}, &mcp.ServerOptions{
		Instructions: instructions,
		Logger:       o.Logger,
	})
	h := &handler{runner: runner, opts: o, slots: make(chan struct{}, o.Slots), clients: map[*mcp.ServerSession]*client{}}
	schema := inputSchema
	if o.Stateless {
		schema = statelessInputSchema
	}
	server.AddTool(&mcp.Tool{
		Name:         ToolName,
		Title:        "Run Python",
		Description:  Description(manifest, &o),
		InputSchema:  schema,
		OutputSchema: outputSchema,
		Annotations: &mcp.ToolAnnotations{
			Title:           "Run Python",
			DestructiveHint: boolPtr(true), // the program may call any of the tools
			OpenWorldHint:   boolPtr(true),
		},
	}, h.call)
	return server
}

func boolPtr(b bool) *bool { return &b }

var inputSchema = json.RawMessage(`{
	"type": "object",
	"properties": {
		"source": {"type": "string", "description": "The Python 3.11 program."},
		"inputs": {"type": "object", "description": "Values for the program's global dict inputs (default {})."},
		"files": {"type": "array", "description": "Files to place in the program's working directory before it runs: each a name relative to it (like \"data/sales.csv\") and its contents as text, or as data in base64.", "items": {"type": "object", "properties": {"name": {"type": "string"}, "text": {"type": "string"}, "data": {"type": "string", "contentEncoding": "base64"}}, "required": ["name"], "additionalProperties": false}},
		"fresh": {"type": "boolean", "description": "true: forget the variables, imports and functions of earlier calls and run in a new, empty session (default false)."}
	},
	"required": ["source"],
	"additionalProperties": false
}`)

var statelessInputSchema = json.RawMessage(`{
	"type": "object",
	"properties": {
		"source": {"type": "string", "description": "The Python 3.11 program."},
		"inputs": {"type": "object", "description": "Values for the program's global dict inputs (default {})."},
		"files": {"type": "array", "description": "Files to place in the program's working directory before it runs: each a name relative to it (like \"data/sales.csv\") and its contents as text, or as data in base64.", "items": {"type": "object", "properties": {"name": {"type": "string"}, "text": {"type": "string"}, "data": {"type": "string", "contentEncoding": "base64"}}, "required": ["name"], "additionalProperties": false}}
	},
	"required": ["source"],
	"additionalProperties": false
}`)

var outputSchema = json.RawMessage(`{
	"type": "object",
	"properties": {
		"notice": {"type": "string", "description": "Set when the state of earlier calls was lost and the program ran in a new, empty session."},
		"value": {"description": "The program's result: the global result, else its last expression's value."},
		"stdout": {"type": "string", "description": "What the program printed."},
		"stderr": {"type": "string", "description": "What the program wrote to sys.stderr."},
		"files": {"type": "array", "description": "The files the program created or changed in its working directory, each also an embedded resource of the result.", "items": {"type": "object", "properties": {"name": {"type": "string"}, "bytes": {"type": "integer"}}}},
		"files_left_out": {"type": "integer", "description": "How many more files the program left, past the limit on files returned."}
	},
	"required": ["value", "stdout"]
}`)

// Description returns run_python's description for manifest and a server
// with opts (nil: the defaults): how programs run, whether state persists
// from call to call, and the stubs of the tools programs can call.
func Description(manifest spine.Manifest, opts *Options) string {
	o := withDefaults(nil, opts)
	var b strings.Builder
	b.WriteString(`Run a Python 3.11 program in a sandbox and return its result.

The program calls the tools listed below as ordinary Python functions, with keyword arguments only (a class in the list is a namespace: call its tools as namespace.tool(...)); a tool's error is raised at the call as RuntimeError, which the program may catch. Prefer one program that makes several tool calls, loops and computations over many separate run_python calls. The global dict ` + "`inputs`" + ` holds the "inputs" argument. The run's value is the global ` + "`result`" + ` if the program sets it, else the value of its last expression; it must be JSON-encodable. print() output comes back as stdout. The standard library is available; network, environment, subprocesses and threads are not. The program's working directory (/work) and /tmp are its own scratch space, empty at the start but for the files of the "files" argument, and gone after the call (in a session too); the files it creates or changes in the working directory come back as embedded resources.`)
	if o.Stateless {
		b.WriteString(" Nothing persists from one call to the next.")
	} else {
		b.WriteString(" State persists from one call to the next, as in a notebook: the variables, imports, functions and classes a program defines are there for your later programs (`inputs` and `result` are each call's own). Pass \"fresh\": true to start from a new, empty session. A program stopped by its time limit gets KeyboardInterrupt and the state it left stays. If the state was lost (a program that would not stop, or a session unused for long), the next call runs in a new session and its result says so.")
	}
	fmt.Fprintf(&b, " A run is stopped after %v.\n\n", o.Timeout)
	if len(manifest) == 0 {
		b.WriteString("No tools are available to the program.\n")
		return b.String()
	}
	b.WriteString("Tools available to the program:\n\n```python\n")
	b.WriteString(strings.TrimRight(spine.Stubs(manifest), "\n"))
	b.WriteString("\n```\n")
	return b.String()
}

type handler struct {
	runner *spine.Runner
	opts   Options
	slots  chan struct{} // a token per call running a program

	mu      sync.Mutex
	clients map[*mcp.ServerSession]*client // the clients that called run_python, until their MCP session ends
	open    int                            // clients holding a spine.Session, at most opts.MaxSessions
	calls   uint64                         // calls so far: when a client was used last
}

// Result is run_python's structuredContent.
type Result struct {
	Notice          string          `json:"notice,omitempty"` // the state of earlier calls was lost: why
	Value           json.RawMessage `json:"value"`
	Stdout          string          `json:"stdout"`
	Stderr          string          `json:"stderr,omitempty"`
	StdoutTruncated bool            `json:"stdout_truncated,omitempty"`
	StderrTruncated bool            `json:"stderr_truncated,omitempty"`
	Files           []FileInfo      `json:"files,omitempty"`          // each also an embedded resource of the result
	FilesLeftOut    int             `json:"files_left_out,omitempty"` // past the Runner's caps on files
}

// FileInfo names a file the program left in its working directory.
type FileInfo struct {
	Name  string `json:"name"`
	Bytes int    `json:"bytes"`
}

// inputFile is an item of run_python's "files" argument: its contents as
// text or as base64 data, not both.
type inputFile struct {
	Name string  `json:"name"`
	Text *string `json:"text"`
	Data []byte  `json:"data"`
}

// FileURI is the URI of the embedded resource of a file the program left
// at name in its working directory.
func FileURI(name string) string {
	return (&url.URL{Scheme: "file", Path: "/work/" + name}).String()
}

// fileResource is a file the program left, as an embedded resource: text
// when it is UTF-8 without NUL, else a blob.
func fileResource(f spine.File) *mcp.EmbeddedResource {
	rc := &mcp.ResourceContents{URI: FileURI(f.Name), MIMEType: mime.TypeByExtension(path.Ext(f.Name))}
	if len(f.Data) > 0 && utf8.Valid(f.Data) && !bytes.ContainsRune(f.Data, 0) {
		rc.Text = string(f.Data)
		if rc.MIMEType == "" {
			rc.MIMEType = "text/plain"
		}
	} else {
		rc.Blob = append([]byte{}, f.Data...)
		if rc.MIMEType == "" {
			rc.MIMEType = "application/octet-stream"
		}
	}
	return &mcp.EmbeddedResource{Resource: rc}
}

func (h *handler) call(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var args struct {
		Source string          `json:"source"`
		Inputs json.RawMessage `json:"inputs"`
		Fresh  bool            `json:"fresh"` // accepted when stateless too: every call is fresh there
		Files  []inputFile     `json:"files"`
	}
	raw := req.Params.Arguments
	if len(raw) == 0 {
		raw = json.RawMessage("{}")
	}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&args); err != nil {
		return failed("bad arguments: " + err.Error()), nil
	}
	if args.Source == "" {
		return failed(`bad arguments: "source" is missing or empty`), nil
	}
	inputs, err := h.runner.CheckInputs(args.Inputs)
	if err != nil {
		return failed("bad arguments: " + err.Error()), nil
	}
	var files []spine.File
	for _, f := range args.Files {
		data := f.Data
		switch {
		case f.Text != nil && f.Data != nil:
			return failed(fmt.Sprintf("bad arguments: file %q has both text and data; give one", f.Name)), nil
		case f.Text != nil:
			data = []byte(*f.Text)
		}
		files = append(files, spine.File{Name: f.Name, Data: data})
	}
	if err := h.runner.CheckFiles(files); err != nil {
		return failed("bad arguments: " + err.Error()), nil
	}

	select {
	case h.slots <- struct{}{}:
		defer func() { <-h.slots }()
	default:
		return failed(fmt.Sprintf("busy, retry: all %d run slots are in use; call %s again in a moment", cap(h.slots), ToolName)), nil
	}
	request := spine.Request{Source: args.Source, Inputs: inputs, EarlyReads: h.opts.EarlyReads, Files: files}
	if h.opts.Stateless || req.Session == nil {
		runCtx, cancel := context.WithTimeout(ctx, h.opts.Timeout)
		defer cancel()
		out, err := h.runner.Run(runCtx, request)
		return h.answer(ctx, runCtx, out, err, "", nil)
	}
	return h.sessionCall(ctx, req.Session, request, args.Fresh)
}

// answer turns a run's output and error into run_python's result. notice,
// when set, heads it; session is the session the run was in, or nil.
func (h *handler) answer(ctx, runCtx context.Context, out *spine.Output, err error, notice string, session *spine.Session) (*mcp.CallToolResult, error) {
	result := Result{Notice: notice}
	var resources []mcp.Content
	if out != nil {
		result.Stdout, result.Stderr, result.StdoutTruncated, result.StderrTruncated = out.Stdout, out.Stderr, out.StdoutTruncated, out.StderrTruncated
		result.FilesLeftOut = out.FilesLeftOut
		for _, f := range out.Files {
			result.Files = append(result.Files, FileInfo{Name: f.Name, Bytes: len(f.Data)})
			resources = append(resources, fileResource(f))
		}
	}
	failed := func(text string) *mcp.CallToolResult {
		if notice != "" {
			text = notice + "\n\n" + text
		}
		res := failed(text + output(result))
		res.Content = append(res.Content, resources...)
		return res
	}
	outcome := spine.Classify(err)
	switch {
	case outcome == spine.OutcomeOK:
		result.Value = out.Value
		text, err := json.Marshal(result)
		if err != nil {
			return nil, err
		}
		return &mcp.CallToolResult{
			Content:           append([]mcp.Content{&mcp.TextContent{Text: string(text)}}, resources...),
			StructuredContent: result,
		}, nil
	case outcome == spine.OutcomePython:
		var pyErr *spine.PythonError
		errors.As(err, &pyErr)
		text := strings.TrimRight(pyErr.Traceback, "\n")
		if text == "" {
			text = pyErr.Type + ": " + pyErr.Message
		}
		return failed(text), nil
	case errors.Is(runCtx.Err(), context.DeadlineExceeded) && ctx.Err() == nil:
		text := fmt.Sprintf("TimeoutError: the program did not finish within its time limit of %v", h.opts.Timeout)
		if session != nil && errors.Is(session.Err(), spine.ErrSessionLost) {
			text += ". Stopping it lost the Python state of earlier calls: your next call runs in a new, empty session"
		}
		return failed(text), nil
	case ctx.Err() != nil:
		return nil, ctx.Err() // the client went away or cancelled the call
	case outcome == spine.OutcomeClosed:
		return nil, err
	case outcome == spine.OutcomeTooManySessions:
		return failed(fmt.Sprintf("busy, retry: %v; call %s again in a moment", err, ToolName)), nil
	case outcome == spine.OutcomeTooLarge, outcome == spine.OutcomeBadRequest, outcome == spine.OutcomeTimeout:
		return failed(err.Error()), nil
	default: // the Guest failed (a trap, memory): the program may try again
		return failed("the sandbox failed: " + err.Error()), nil
	}
}

// failed is a tool result the model reads as an error.
func failed(text string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}, IsError: true}
}

// output renders a failed run's captured output after its error text.
func output(r Result) string {
	var b strings.Builder
	for _, stream := range []struct {
		name, text string
		truncated  bool
	}{{"stdout", r.Stdout, r.StdoutTruncated}, {"stderr", r.Stderr, r.StderrTruncated}} {
		if stream.text == "" {
			continue
		}
		fmt.Fprintf(&b, "\n\n%s:\n%s", stream.name, strings.TrimRight(stream.text, "\n"))
		if stream.truncated {
			b.WriteString("\n[truncated]")
		}
	}
	if b.Len() == 0 {
		return ""
	}
	b.WriteString("\n")
	return b.String()
}
