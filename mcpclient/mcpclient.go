// Package mcpclient makes the tools of an MCP server into Spine tools.
//
// Each tool the server lists becomes one spine.Manifest entry named
// "namespace.tool_name", with the tool's description, input and output schemas, so that
// a Python program calls it as namespace.tool_name(arg=...). A call sends
// tools/call over the session; the result becomes the Python value:
//
//   - structuredContent, when the server sent it, as is (a dict, a list, ...);
//     from Connect's and Dial's tools an object comes as the server wrote it
//     (a json.RawMessage), so its keys keep the server's order;
//   - otherwise the text content: the text parts joined with "\n", as a Python
//     str (never parsed as JSON: a tool that means structure sends
//     structuredContent); no content at all is None; content with non-text
//     parts (images, audio, resources) is a list of the MCP content objects as
//     dicts ({"type": "image", "mimeType": ..., "data": ...}).
//
// A result with isError set becomes a Go error carrying its text, which the
// program sees as RuntimeError; so does a protocol failure (an unknown tool, a
// lost connection, a cancelled call).
//
// Tools and Connect use a session the caller keeps. Dial returns a Server that
// keeps itself connected: when its session ends, it connects again with
// backoff, and its tools fail with a clear error (a *DownError) meanwhile.
//
// A tool's parameters are its input schema's properties in the order the
// server wrote them, which Connect and Dial read from the wire (the SDK's
// decoded schema has lost it); Tools cannot, and its tools are KeywordOnly.
// Every tool checks a call's arguments against its input schema before the
// server is called (spine.ValidateArguments), so that a mistake is the
// program's TypeError, as for a Go tool.
//
// Early reads are allowed only for the tools named in Options.EarlyReads: the
// Host vouches for them. MCP annotations such as readOnlyHint come from the
// server and are never trusted for this.
//
// Options.Tools and Options.ExcludeTools choose which of a server's tools
// become entries. A tool whose execution.taskSupport is "required" (it can
// only be called as an MCP task, which Spine's calls are not) is left out,
// and Options.Logger hears of it; Connect and Dial see that field, Tools
// cannot (the SDK's decoded Tool lacks it).
package mcpclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spine-run/spine"
)

// Options are the Host's choices about one server's tools. A nil *Options
// means none.
type Options struct {
	// EarlyReads lists the tools, by their MCP names as the server lists them,
	// that may be started before the program reaches them (AllowEarlyRead).
	// List only tools that read, honour cancellation and give the same answer
	// within a run. Naming a tool the server does not have is an error.
	EarlyReads []string

	// ConnectTimeout bounds each reconnection of a Server (the transport's
	// connection and the MCP handshake); 0 means 30s.
	ConnectTimeout time.Duration

	// CallTimeout bounds each call of a Server's tools (on top of the
	// caller's ctx); 0 means a minute. A call that gets no answer in time
	// fails, and the session is replaced (a command's process is ended and
	// started again). Err reports the server stuck once a call has waited a
	// quarter of it with nothing from the server since.
	CallTimeout time.Duration

	// StartDown makes Dial return a Server that is down, rather than an
	// error, when the server cannot be reached or listed at first: the
	// Server connects in the background as after a lost session (calls of
	// its tools fail at once with a *DownError meanwhile), and lists its
	// tools once connected. Its Tools are then stand-ins for the tools
	// named in Tools (keyword arguments, no schema: the server's is not
	// known) that call the server's tools once listed; without Tools, it
	// has none. An error of the lists (a name the server does not have) is
	// then the error of its tools' calls and of Err.
	StartDown bool

	// CallerOf, if not nil, names the caller a call is made for (a tenant,
	// a token's name; "" for none), which a Server blames as one when its
	// programs break the server's sessions again and again: after 3 breaks
	// with no other caller's call in flight, its calls are refused for 10
	// minutes, while other callers' go on. A program (spine.RunOf) whose
	// call breaks a session alone in flight is refused anyway.
	CallerOf func(ctx context.Context) string

	// Tools, when not nil, are the only tools (by MCP name) that become
	// entries; ExcludeTools are tools left out. Naming a tool the server
	// does not have, in either, is an error: a typo would otherwise offer a
	// tool meant to be hidden, or hide one meant to be offered.
	Tools        []string
	ExcludeTools []string

	// Logger, if not nil, hears of a Server's sessions lost and regained,
	// and (at Info) of the tools left out because they need MCP tasks.
	Logger *slog.Logger
}

// Tools lists every tool of the server behind session (following pagination)
// and returns them as manifest entries under namespace. namespace must be a
// Python identifier, or "" to put the tools at the top level. The entries call
// the server through session, which must stay open while they are in use.
//
// Tool names that are not Python identifiers are rewritten by PythonName; two
// tools that end up with the same name are an error naming both.
func Tools(ctx context.Context, session *mcp.ClientSession, namespace string, opts *Options) (spine.Manifest, error) {
	if session == nil {
		return nil, errors.New("mcpclient: nil session")
	}
	if namespace != "" {
		if err := spine.ValidName(namespace); err != nil {
			return nil, fmt.Errorf("mcpclient: namespace: %w", err)
		}
	}
	tools, err := list(ctx, session, namespace)
	if err != nil {
		return nil, err
	}
	return manifest(func(name string, _ bool) spine.Tool { return caller(session, name) }, namespace, tools, opts, nil)
}

// list lists every tool of the server behind session, following pagination.
func list(ctx context.Context, session *mcp.ClientSession, namespace string) ([]*mcp.Tool, error) {
	var tools []*mcp.Tool
	for tool, err := range session.Tools(ctx, nil) {
		if err != nil {
			return nil, fmt.Errorf("mcpclient: %s: listing tools: %w", label(namespace), err)
		}
		tools = append(tools, tool)
	}
	return tools, nil
}

// Connect connects to an MCP server over transport (an *mcp.CommandTransport
// for a local process over stdio, an *mcp.StreamableClientTransport for a URL)
// and returns its tools as Tools does, and the session. Close the session when
// the tools are no longer used; for a command, that ends the process.
func Connect(ctx context.Context, transport mcp.Transport, namespace string, opts *Options) (spine.Manifest, *mcp.ClientSession, error) {
	if namespace != "" {
		if err := spine.ValidName(namespace); err != nil {
			return nil, nil, fmt.Errorf("mcpclient: namespace: %w", err)
		}
	}
	watch := newTaskWatch()
	session, err := newClient().Connect(ctx, watch.watch(transport), nil)
	if err != nil {
		return nil, nil, fmt.Errorf("mcpclient: %s: connecting: %w", label(namespace), err)
	}
	tools, err := list(ctx, session, namespace)
	var m spine.Manifest
	if err == nil {
		m, err = manifest(func(name string, _ bool) spine.Tool { return caller(session, name) }, namespace, tools, opts, watch)
	}
	if err != nil {
		session.Close()
		return nil, nil, err
	}
	return m, session, nil
}

func newClient() *mcp.Client {
	return mcp.NewClient(&mcp.Implementation{Name: "spine", Version: "v1"}, nil)
}

func label(namespace string) string {
	if namespace == "" {
		return "server"
	}
	return "server " + namespace
}

// manifest makes tools into manifest entries; call returns the spine.Tool
// that calls the MCP tool of a name, which may be called again when retry
// says so (retryable). watch, when not nil, says which tools need tasks.
func manifest(call func(name string, retry bool) spine.Tool, namespace string, tools []*mcp.Tool, opts *Options, watch *taskWatch) (spine.Manifest, error) {
	if opts == nil {
		opts = &Options{}
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	early := make(map[string]bool)
	for _, name := range opts.EarlyReads {
		early[name] = true
	}
	// Every name in the lists must be a tool of the server.
	listed := make(map[string]bool, len(tools))
	for _, tool := range tools {
		listed[tool.Name] = true
	}
	for _, names := range [][]string{opts.Tools, opts.ExcludeTools} {
		var missing []string
		for _, name := range names {
			if !listed[name] {
				missing = append(missing, name)
			}
		}
		if len(missing) > 0 {
			sort.Strings(missing)
			return nil, fmt.Errorf("mcpclient: %s: the tool lists name tools it does not have: %s", label(namespace), strings.Join(missing, ", "))
		}
	}
	m := make(spine.Manifest, len(tools))
	origin := make(map[string]string) // Python name -> MCP name
	for _, tool := range tools {
		if opts.Tools != nil && !slices.Contains(opts.Tools, tool.Name) || slices.Contains(opts.ExcludeTools, tool.Name) {
			continue
		}
		if watch.needsTask(tool.Name) {
			if slices.Contains(opts.Tools, tool.Name) || early[tool.Name] {
				return nil, fmt.Errorf("mcpclient: %s: tool %q can only be called as an MCP task, which Spine does not do", label(namespace), tool.Name)
			}
			logger.Info("mcp tool left out: it can only be called as an MCP task", "server", label(namespace), "tool", tool.Name)
			continue
		}
		py := PythonName(tool.Name)
		if py == "" {
			return nil, fmt.Errorf("mcpclient: %s: tool %q has no usable Python name", label(namespace), tool.Name)
		}
		if namespace != "" {
			py = namespace + "." + py
		}
		if other, clash := origin[py]; clash {
			first, second := other, tool.Name
			if second < first {
				first, second = second, first
			}
			return nil, fmt.Errorf("mcpclient: %s: tools %q and %q would both be %s in Python; rename one on the server", label(namespace), first, second, py)
		}
		origin[py] = tool.Name
		// The schemas as the server wrote them, when the watch saw them: the
		// SDK's decoded ones have lost the order of their properties, which
		// is the order of the tool's parameters. Without it, the tool's
		// arguments can only be passed by keyword.
		written, ordered := watch.schemasOf(tool.Name)
		schema, err := schemaJSON(tool.InputSchema, written.input, ordered)
		if err != nil {
			return nil, fmt.Errorf("mcpclient: %s: tool %q: input schema: %w", label(namespace), tool.Name, err)
		}
		// A tool that declares an output schema returns structured content
		// (Value), so the schema is the Python value's.
		output, err := schemaJSON(tool.OutputSchema, written.output, ordered)
		if err != nil {
			return nil, fmt.Errorf("mcpclient: %s: tool %q: output schema: %w", label(namespace), tool.Name, err)
		}
		description := tool.Description
		if description == "" {
			description = tool.Title
		}
		spec := spine.ToolSpec{
			Call:           inOrder(call(tool.Name, early[tool.Name] || retryable(tool)), watch),
			AllowEarlyRead: early[tool.Name],
			Description:    description,
			InputSchema:    schema,
			OutputSchema:   output,
			KeywordOnly:    !ordered || !isJSON(written.input),
		}
		// The arguments are checked against the schema before the server is
		// called, so that a mistake raises the TypeError a Go tool's would.
		if checked, err := spine.ValidateArguments(spec); err == nil {
			spec = checked
		} else {
			logger.Info("mcp tool's arguments not checked: its input schema cannot be resolved", "server", label(namespace), "tool", tool.Name, "error", err)
		}
		m[py] = spec
		delete(early, tool.Name)
	}
	if len(early) > 0 {
		missing := make([]string, 0, len(early))
		for name := range early {
			missing = append(missing, name)
		}
		sort.Strings(missing)
		return nil, fmt.Errorf("mcpclient: %s: early reads allowed for tools it does not have or that are left out: %s", label(namespace), strings.Join(missing, ", "))
	}
	return m, nil
}

// retryable reports whether the server says that calling tool twice does
// no more than calling it once (readOnlyHint or idempotentHint): a call
// lost with its session, which another program's call may have broken, is
// made again once on the next session. (The tools of Options.EarlyReads are
// retried too: the Host vouches that they only read.)
func retryable(tool *mcp.Tool) bool {
	a := tool.Annotations
	return a != nil && (a.ReadOnlyHint || a.IdempotentHint)
}

// schemaJSON is a tool's schema as JSON: as the server wrote it when
// ordered (and it is JSON), else as the SDK decoded it (decoded); nil for none.
func schemaJSON(decoded any, written json.RawMessage, ordered bool) (json.RawMessage, error) {
	if decoded == nil {
		return nil, nil
	}
	if ordered && isJSON(written) {
		var compact bytes.Buffer
		if json.Compact(&compact, written) == nil {
			return compact.Bytes(), nil
		}
	}
	return json.Marshal(decoded)
}

// caller returns the spine.Tool that calls the MCP tool name.
func caller(session *mcp.ClientSession, name string) spine.Tool {
	return func(ctx context.Context, args json.RawMessage) (any, error) {
		if len(args) == 0 {
			args = json.RawMessage("{}")
		}
		result, err := session.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		return Value(result)
	}
}

// Value is the Python value of a tools/call result, as the package comment
// describes, or the error of a result with isError set.
func Value(result *mcp.CallToolResult) (any, error) {
	if result == nil {
		return nil, errors.New("empty tool result")
	}
	if result.NeedsInput() {
		return nil, errors.New("the server asked for more input, which Spine cannot give")
	}
	if result.IsError {
		text := joinText(result.Content)
		if text == "" {
			text = "the tool reported an error"
		}
		return nil, errors.New(text)
	}
	if result.StructuredContent != nil {
		return result.StructuredContent, nil
	}
	if len(result.Content) == 0 {
		return nil, nil
	}
	allText := true
	for _, c := range result.Content {
		if _, ok := c.(*mcp.TextContent); !ok {
			allText = false
		}
	}
	if allText {
		return joinText(result.Content), nil
	}
	parts := make([]json.RawMessage, 0, len(result.Content))
	for _, c := range result.Content {
		encoded, err := json.Marshal(c)
		if err != nil {
			return nil, fmt.Errorf("tool result content: %w", err)
		}
		parts = append(parts, encoded)
	}
	return parts, nil
}

func joinText(content []mcp.Content) string {
	var texts []string
	for _, c := range content {
		if t, ok := c.(*mcp.TextContent); ok {
			texts = append(texts, t.Text)
		}
	}
	return strings.Join(texts, "\n")
}

// PythonName turns an MCP tool name into a Python identifier: every character
// other than an ASCII letter, digit or "_" becomes "_" (so "get-issue" and
// "repo.search" become get_issue and repo_search); a name starting with a
// digit gets a leading "_"; leading underscores are cut to one (names starting
// with "__" belong to the Guest); a Python keyword gets a trailing "_"
// (import_). It returns "" only for a name with nothing usable in it.
func PythonName(name string) string {
	var b strings.Builder
	for _, c := range name { // an invalid byte is one RuneError: one "_"
		if c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' {
			b.WriteRune(c)
		} else {
			b.WriteByte('_')
		}
	}
	s := b.String()
	if strings.Trim(s, "_") == "" {
		return ""
	}
	if s[0] >= '0' && s[0] <= '9' {
		s = "_" + s
	}
	if strings.HasPrefix(s, "__") {
		s = "_" + strings.TrimLeft(s, "_")
	}
	if spine.ValidName("x."+s) != nil { // a keyword: the only way s can fail as a second segment now
		s += "_"
	}
	return s
}
