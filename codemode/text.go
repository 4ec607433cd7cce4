package codemode

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/spine-run/spine"
)

// Description returns run_python's description for manifest under the
// default limits of a Runner, the same text New gives a Tool with opts (nil:
// the defaults) on a Runner made with nil spine.Options: for a caller that
// describes the tool without a Runner at hand.
func Description(manifest spine.Manifest, opts *Options) string {
	o := withDefaults(opts)
	limits := spine.DefaultOptions()
	return describe(manifest, o, o.Timeout, &limits)
}

// describe writes the description: what a program can do, then what it
// cannot, then the limits, then the stubs. The rules are those of
// docs/python.md and the README's "What a program sees" and "Limits", as a
// model needs them to write a program that runs the first time.
func describe(manifest spine.Manifest, o Options, timeout time.Duration, limits *spine.Options) string {
	sessions := o.Sessions
	var b strings.Builder
	b.WriteString(`Run a Python 3.11 program in a sandbox and return its result.

The program calls the tools listed below as ordinary Python functions with the signatures shown, passing arguments positionally or by keyword (a class in the list is a namespace: call its tools as namespace.tool(...)); None for an optional argument means it is not given; arguments that do not fit raise TypeError; a tool's error is raised at the call as RuntimeError, which the program may catch. Prefer one program that makes several tool calls, loops and computations over many separate ` + ToolName + ` calls. The global dict ` + "`inputs`" + ` holds the "inputs" argument. The run's value is the global ` + "`result`" + ` if the program sets it, else the value of its last expression: as JSON, or as its repr when it has no JSON form (a DataFrame, an object). print() output comes back as stdout. An uncaught exception comes back as its traceback, with what the program printed: fix the program and call again.

The standard library is available (json, re, datetime, math, statistics, collections, itertools, csv, sqlite3, zlib, zoneinfo, asyncio and the rest); third-party packages are not. There is no network (sockets and urllib raise OSError), no environment variables, no subprocesses and no threads (a started thread or an executor's task runs to its end at once). The program's working directory (/work) and /tmp are its own scratch space, empty at the start but for the files of the "files" argument, and gone after the call; the files it creates or changes in the working directory are returned with the result. Host files cannot be reached.`)
	if o.MaxImageBytes >= 0 {
		fmt.Fprintf(&b, " The PNG, JPEG, GIF and WebP images (not animated) it writes there, or shows with display(obj) (an object with _repr_png_, or display(bundle, raw=True) of {\"image/png\": bytes}) or as its value, are shown to you as images after the result: at most %d per call, %s each and %s in all.",
			o.MaxImages, size(int64(o.MaxImageBytes)), size(int64(o.MaxAnswerImageBytes)))
	}
	if sessions {
		b.WriteString(" State persists from one call to the next, as in a notebook: the variables, imports, functions and classes a program defines are there for your later programs (`inputs` and `result` are each call's own, and so are the files). Pass \"fresh\": true to start from a new, empty session. A program stopped by its time limit gets KeyboardInterrupt and the state it left stays. If the state was lost (a program that would not stop, or a session unused for long), the next call runs in a new session and its result says so.")
	} else {
		b.WriteString(" Nothing persists from one call to the next.")
	}
	fmt.Fprintf(&b, "\n\nLimits: a run is stopped after %v. Memory: %s (MemoryError past it). Tool calls: %d per run. The result: %s as JSON. stdout and stderr: %s each, the rest cut off. Scratch files: %s (OSError past it).\n\n",
		timeout, size(int64(limits.MemoryLimit)), limits.MaxToolCalls, size(int64(limits.MaxResult)), size(int64(limits.MaxOutput)), size(limits.ScratchSize))
	if len(manifest) == 0 {
		b.WriteString("No tools are available to the program.\n")
		return b.String()
	}
	stubs := spine.Stubs(manifest)
	if limit := o.StubLimit; limit >= 0 && len(stubs) > cmp.Or(limit, DefaultStubLimit) {
		writeIndex(&b, manifest)
		return b.String()
	}
	b.WriteString("Tools available to the program:\n\n```python\n")
	b.WriteString(strings.TrimRight(stubs, "\n"))
	b.WriteString("\n```\n")
	return b.String()
}

// writeIndex writes the tools as an index, for a manifest whose stubs are
// too long to list: each tool's name and its description's first line, and
// how a program reads the rest.
func writeIndex(b *strings.Builder, manifest spine.Manifest) {
	names := make([]string, 0, len(manifest))
	for name := range manifest {
		names = append(names, name)
	}
	sort.Strings(names)
	fmt.Fprintf(b, "Tools available to the program: %d, too many to show their signatures here. Before calling a tool, read its signature and documentation in a program: print(tools.describe(\"name\")) prints its Python stub; tools.search(\"words\") returns the tools whose name or description has the words, best first, as a list of {\"name\", \"description\"}. A dotted name is a namespace: call namespace.tool(...). The tools:\n\n", len(names))
	for _, name := range names {
		line, _, _ := strings.Cut(strings.TrimSpace(manifest[name].Description), "\n")
		if line = strings.TrimSpace(line); line == "" {
			fmt.Fprintf(b, "- %s\n", name)
			continue
		}
		if len(line) > 160 {
			line = strings.ToValidUTF8(line[:157], "") + "..."
		}
		fmt.Fprintf(b, "- %s: %s\n", name, line)
	}
}

// size writes n bytes as MiB or KiB when it is a whole number of them.
func size(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// Result is what a run_python call gives the model. Its JSON fields are the
// Result of a successful run (OutputSchema); an MCP server sends them as the
// structuredContent. Text is what the model reads.
type Result struct {
	// Notice, when set, heads the result: the state of earlier calls was
	// lost, and why (set by a caller with sessions).
	Notice string `json:"notice,omitempty"`

	Value           json.RawMessage `json:"value"`             // the run's value, JSON; null on an error
	Display         string          `json:"display,omitempty"` // a value without a JSON form as a notebook's Out[ ] shows it (its text/plain)
	Stdout          string          `json:"stdout"`
	Stderr          string          `json:"stderr,omitempty"`
	StdoutTruncated bool            `json:"stdout_truncated,omitempty"`
	StderrTruncated bool            `json:"stderr_truncated,omitempty"`
	Files           []FileInfo      `json:"files,omitempty"`          // the files the program left; their data is in Output.Files
	FilesLeftOut    int             `json:"files_left_out,omitempty"` // past the Runner's caps on files

	// Images are the images a successful run made, which the caller sends
	// the model after Text (see Image); ImagesLeftOut says which were left
	// out and why, for the model: "2 images left out: over the 1 MiB limit
	// per image (big.png, display 3)".
	Images        []Image `json:"images,omitempty"`
	ImagesLeftOut string  `json:"images_left_out,omitempty"`

	// IsError says the call failed; Error is why, for the model: the
	// traceback of a Python error, or the limit, or the bad argument.
	IsError bool   `json:"-"`
	Error   string `json:"-"`

	// Output is the run's Output, nil when the program did not run: the
	// files it left are there, with their data.
	Output *spine.Output `json:"-"`
}

// FileInfo names a file the program left in its working directory.
type FileInfo struct {
	Name  string `json:"name"`
	Bytes int    `json:"bytes"`
}

// Failed returns an error Result whose text is text, for a call the caller
// refuses before it runs (a busy server, say).
func Failed(text string) *Result {
	return &Result{IsError: true, Error: text}
}

// Text returns the result as the model reads it. A success is the Result's
// JSON on one line:
//
//	{"value":63,"stdout":"pricing\n"}
//
// An error is Notice (when set), Error, and what the program printed:
//
//	Traceback (most recent call last):
//	  File "<agent>", line 2, in <module>
//	RuntimeError: no such key: "unicorn"
//
//	stdout:
//	pricing
func (r *Result) Text() string {
	if !r.IsError {
		return r.JSON()
	}
	text := r.Error
	if r.Notice != "" {
		text = r.Notice + "\n\n" + text
	}
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
		return text
	}
	b.WriteString("\n")
	return text + b.String()
}

// JSON returns the Result's JSON fields on one line, with <, > and & as
// they are (a model reads them).
func (r *Result) JSON() string {
	c := *r
	if len(c.Value) == 0 {
		c.Value = json.RawMessage("null")
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(&c); err != nil { // Value comes from the Runner, valid JSON
		return fmt.Sprintf(`{"value":null,"stdout":"","error":%q}`, err.Error())
	}
	return strings.TrimSuffix(b.String(), "\n")
}

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

var sessionInputSchema = json.RawMessage(`{
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

var outputSchema = json.RawMessage(`{
	"type": "object",
	"properties": {
		"notice": {"type": "string", "description": "Set when the state of earlier calls was lost and the program ran in a new, empty session."},
		"value": {"description": "The program's result: the global result, else its last expression's value."},
		"display": {"type": "string", "description": "The result as Python shows it (its repr), when it has no JSON form: a DataFrame, an object, a complex number."},
		"stdout": {"type": "string", "description": "What the program printed."},
		"stderr": {"type": "string", "description": "What the program wrote to sys.stderr."},
		"stdout_truncated": {"type": "boolean", "description": "The program printed more than the limit; the rest was cut off."},
		"stderr_truncated": {"type": "boolean", "description": "The program wrote more to sys.stderr than the limit; the rest was cut off."},
		"files": {"type": "array", "description": "The files the program created or changed in its working directory.", "items": {"type": "object", "properties": {"name": {"type": "string"}, "bytes": {"type": "integer"}}}},
		"files_left_out": {"type": "integer", "description": "How many more files the program left, past the limit on files returned."},
		"images": {"type": "array", "description": "The images the program wrote or displayed, which follow this result: where each comes from (a file by name, a display by its number from 1, or the value), its type, size in pixels and bytes.", "items": {"type": "object", "properties": {"source": {"type": "string", "enum": ["file", "display", "value"]}, "name": {"type": "string"}, "index": {"type": "integer"}, "mime_type": {"type": "string"}, "width": {"type": "integer"}, "height": {"type": "integer"}, "bytes": {"type": "integer"}}}},
		"images_left_out": {"type": "string", "description": "Which images were not sent, and why (a size limit, a damaged image)."}
	},
	"required": ["value", "stdout"]
}`)
