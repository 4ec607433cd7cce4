// Package mcpserver offers a spine.Runner to LLM clients as a Model Context
// Protocol server with one tool, run_python(source, inputs, files, fresh): code mode
// for any MCP client. The tool's description carries the Python stubs of the
// Runner's tools (spine.Stubs), so the model knows what it can call from its
// program. The tool itself — its description, its schemas, the text of its
// results — is package codemode's, which gives it to any agent loop; this
// package serves it over MCP, with a session per client.
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
// With Options.Store the sessions outlive the process and serve a fleet:
// NewServer's Server.HTTPHandler gives out MCP session ids that any replica
// on the store serves, loading the client's session from the store, for
// the token that made it, when it does not hold it live; Server.Close
// writes the sessions the store lacks (docs/scaling.md).
//
// The server New returns is the official Go SDK's; serve it over any of its
// transports:
//
//	server := mcpserver.New(runner, nil)
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
// images of a successful run — the still PNG, JPEG, GIF and WebP files it
// wrote (known by their bytes) and the image formats of what it displayed
// and of its value — follow the text as ImageContent, which a model sees as
// images, at most Options.MaxImages of them, within MaxImageBytes each and
// MaxAnswerImageBytes in all ("images" in structuredContent lists them;
// "images_left_out" says which were left out and why); an image file sent
// so is not sent again as a resource. The files of the "files" argument
// are placed in the working directory first.
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
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net/url"
	"path"
	"runtime"
	"slices"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/codemode"
	"github.com/spine-run/spine/fleet"
	"github.com/spine-run/spine/sessionstore"
)

// ToolName is the name of the server's one tool.
const ToolName = codemode.ToolName

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

	// ClientOf, when set, names the client a call comes from (its address,
	// its token's name): the MCP sessions of one client share its share of
	// MaxSessions. Nil: every MCP session is a client of its own. Whatever
	// it is, a place is made by closing a session of the client that holds
	// the most, so a client opening many sessions closes its own, never
	// another's while it holds more than they do.
	ClientOf func(*mcp.CallToolRequest) string

	// MaxSessionsPerClient, when positive, caps the sessions one client (see
	// ClientOf) keeps: past it, the client's own session used least recently
	// that is not running is closed for the new one.
	MaxSessionsPerClient int

	// Store, when set, keeps every client's session in a session store
	// shared by the replicas of a fleet, under the client's MCP session id
	// (docs/scaling.md, docs/rationale.md "MCP sessions in the store"):
	// serve it with Server.HTTPHandler, whose MCP session ids any replica
	// serves. A session this server does not hold live is loaded from the
	// store, for the token that made it (Authorization: Bearer); past
	// MaxSessions the one put aside is written to the store, not lost; Close
	// writes them all. Nil: sessions live and end in this process.
	Store sessionstore.Store

	// StoreWrite is when a session is written to Store, as for spine
	// serve (fleet.WritePolicy): fleet.WriteRun (after each call, before
	// answering it; the default), fleet.WriteAnswer (after answering it) or
	// fleet.WriteHibernate (only when it hibernates: this server puts it
	// aside, or the Runner hibernates it with its OnHibernate set to
	// Server.Hibernated; and at Close: replicas must then be sticky).
	StoreWrite fleet.WritePolicy

	// MaxSnapshot caps a snapshot written to or loaded from Store, in
	// bytes. Default: the Runner's SessionOptions.MaxSnapshot, the largest
	// snapshot its sessions can make.
	MaxSnapshot int64

	// ShareOf, when set, returns what the sessions of an owner
	// (sessionstore.Owner of a token) may take (door.Tenants.ShareOf gives
	// a tokens file's): their share of the Runner's sessions
	// (fleet.Share.Tenant), so that one token's cannot take another's; and
	// the bytes they may keep in Store across every replica
	// (sessionstore's PutOwned), past which a call is undone as one over
	// MaxSnapshot is. nil: every owner has the whole Runner and no cap.
	ShareOf func(owner string) fleet.Share

	// SessionsOf, when set, returns the cap of one client's sessions in
	// place of MaxSessionsPerClient (0: MaxSessionsPerClient's), e.g. each
	// token's share from a tokens file.
	SessionsOf func(client string) int

	// MaxImages, MaxImageBytes and MaxAnswerImageBytes cap the images a
	// result gives the model: how many, each and all together
	// (codemode.Options). Defaults 8, 1 MiB and 4 MiB; a negative
	// MaxImageBytes sends none.
	MaxImages           int
	MaxImageBytes       int
	MaxAnswerImageBytes int

	// Logger is given to the SDK's server. nil means no logging.
	Logger *slog.Logger

	// ServerLog receives the server's own warnings and errors: the
	// sessions Close drops without a store, and writes to Store that failed
	// with no call to answer. nil means no logging.
	ServerLog *slog.Logger
}

// DefaultTimeout is the default of Options.Timeout.
const DefaultTimeout = codemode.DefaultTimeout

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
	if o.StoreWrite == "" {
		o.StoreWrite = fleet.WriteRun
	}
	if o.MaxSnapshot <= 0 && runner != nil {
		o.MaxSnapshot = int64(runner.Options().Sessions.MaxSnapshot)
	}
	if o.ServerLog == nil {
		o.ServerLog = slog.New(slog.DiscardHandler)
	}
	return o
}

// New returns an MCP server whose tool run_python runs programs with runner.
// Only the descriptions and schemas of the Runner's tools (Runner.Manifest)
// are read, for the stubs in the tool's description. runner stays the
// caller's: close it when the server is done. opts may be nil. With
// Options.Store, use NewServer.
func New(runner *spine.Runner, opts *Options) *mcp.Server {
	return NewServer(runner, opts).MCP()
}

// A Server is the MCP server New returns, with what serving its sessions
// from a store takes: an HTTP handler whose MCP session ids every replica
// serves, and a Close that writes the sessions.
type Server struct {
	mcp *mcp.Server
	h   *handler
}

// MCP returns the SDK's server, to serve over any of its transports.
func (s *Server) MCP() *mcp.Server { return s.mcp }

// NewServer is New, returning the Server.
func NewServer(runner *spine.Runner, opts *Options) *Server {
	o := withDefaults(runner, opts)
	if _, err := fleet.ParseWritePolicy(string(o.StoreWrite)); err != nil {
		panic("mcpserver: Options.StoreWrite: " + err.Error())
	}
	instructions := "Call " + ToolName + " with a Python program that uses the tools listed in its description; " +
		"one program can make many tool calls and combine their results."
	if !o.Stateless {
		instructions += " Variables, imports and functions persist from one call to the next."
	}
	server := mcp.NewServer(&mcp.Implementation{Name: o.Name, Title: "Spine: sandboxed Python with tools", Version: o.Version}, &mcp.ServerOptions{
		Instructions:              instructions,
		Logger:                    o.Logger,
		SupportedProtocolVersions: o.protocolVersions(),
	})
	tool := codemode.New(runner, o.codemode())
	h := &handler{runner: runner, tool: tool, opts: o, slots: make(chan struct{}, o.Slots), waiting: make(chan struct{}, o.Slots), conns: map[*mcp.ServerSession]string{},
		asks: runner != nil && runner.Options().Approve != nil, asking: map[string]*askingCall{}}
	h.cut, h.doCut = context.WithCancel(context.Background())
	h.fleet = fleet.New(runner, &fleet.Options{
		Store:        o.Store,
		Write:        o.StoreWrite,
		MaxSnapshot:  o.MaxSnapshot,
		StoreTimeout: o.Timeout,
		ShareOf:      o.ShareOf,
		Places:       o.MaxSessions,
		PlacesOf:     h.perClient,
		Logger:       o.ServerLog,
	})
	server.AddTool(&mcp.Tool{
		Name:         ToolName,
		Title:        "Run Python",
		Description:  tool.Description(),
		InputSchema:  tool.InputSchema(),
		OutputSchema: tool.OutputSchema(),
		Annotations: &mcp.ToolAnnotations{
			Title:           "Run Python",
			DestructiveHint: boolPtr(true), // the program may call any of the tools
			OpenWorldHint:   boolPtr(true),
		},
	}, h.call)
	return &Server{mcp: server, h: h}
}

// protocolVersions returns the MCP versions the server speaks: with a
// store, those with MCP sessions (before 2026-07-28, which has none to keep
// a session under); nil for all.
func (o *Options) protocolVersions() []string {
	if o.Store == nil {
		return nil
	}
	return slices.DeleteFunc(mcp.SupportedProtocolVersions(), func(v string) bool { return v >= sessionless })
}

// sessionless is the first MCP version without MCP sessions.
const sessionless = "2026-07-28"

// codemode returns the settings of the server's run_python.
func (o *Options) codemode() *codemode.Options {
	return &codemode.Options{Timeout: o.Timeout, EarlyReads: o.EarlyReads, Sessions: !o.Stateless,
		MaxImages: o.MaxImages, MaxImageBytes: o.MaxImageBytes, MaxAnswerImageBytes: o.MaxAnswerImageBytes}
}

func boolPtr(b bool) *bool { return &b }

// Description returns run_python's description for manifest and a server
// with opts (nil: the defaults) on a Runner with the default limits
// (codemode.Description): how programs run, whether state persists from call
// to call, the limits, and the stubs of the tools programs can call. The
// server's own description states its Runner's limits.
func Description(manifest spine.Manifest, opts *Options) string {
	o := withDefaults(nil, opts)
	return codemode.Description(manifest, o.codemode())
}

type handler struct {
	runner  *spine.Runner
	tool    *codemode.Tool
	opts    Options
	slots   chan struct{} // a token per call running a program
	waiting chan struct{} // a token per call whose run waits for its user without its slot (approvals.go)
	fleet   *fleet.Fleet  // the clients' sessions (sessions.go)

	cut   context.Context // done once Cut is called
	doCut context.CancelFunc

	mu    sync.Mutex
	conns map[*mcp.ServerSession]string // without a store: the fleet session id of each MCP session that called run_python

	asks   bool                   // the Runner has Options.Approve: calls may wait for the user
	asking map[string]*askingCall // calls waiting for the user's answer by input request, by their state (approvals.go); under mu
}

// Result is run_python's structuredContent, and its text as JSON.
type Result = codemode.Result

// FileInfo names a file the program left in its working directory.
type FileInfo = codemode.FileInfo

// fileURI is the URI of the embedded resource of a file the program left
// at name in its working directory.
func fileURI(name string) string {
	return (&url.URL{Scheme: "file", Path: "/work/" + name}).String()
}

// fileResource is a file the program left, as an embedded resource: text
// when it is UTF-8 without NUL, else a blob.
func fileResource(f spine.File) *mcp.EmbeddedResource {
	rc := &mcp.ResourceContents{URI: fileURI(f.Name), MIMEType: mime.TypeByExtension(path.Ext(f.Name))}
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
	if h.cut.Err() != nil {
		return nil, fleet.ErrCut
	}
	if h.asks && (req.Params.RequestState != "" || asksByInputRequests(req.Session)) {
		return h.callAsking(ctx, req) // approvals.go
	}
	return h.run(ctx, req, approval(req.Session))
}

// run runs the program of req and makes its answer; ask makes its
// Request.Approval, for the run slot it holds.
func (h *handler) run(ctx context.Context, req *mcp.CallToolRequest, ask func(*heldSlot) spine.ApprovalFunc) (*mcp.CallToolResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(h.cut, cancel)() // Cut stops the call
	request, fresh, err := h.tool.Request(req.Params.Arguments)
	if err != nil {
		return toolResult(codemode.Failed(err.Error()))
	}
	select {
	case h.slots <- struct{}{}:
	default:
		return toolResult(codemode.Failed(fmt.Sprintf("busy, retry: all %d run slots are in use; call %s again in a moment", cap(h.slots), ToolName)))
	}
	slot := &heldSlot{slots: h.slots, waiting: h.waiting, held: true}
	defer slot.release()
	request.Approval = ask(slot) // approvals.go
	id := storedID(h.opts.Store, req)
	if h.opts.Stateless || req.Session == nil || h.opts.Store != nil && id == "" {
		out, err := h.runner.Run(ctx, request)
		return h.answer(ctx, out, err, "", nil)
	}
	who, owner := "", "" // the owner's share counts the session, stored or not
	if h.opts.ClientOf != nil {
		who = h.opts.ClientOf(req)
	}
	if req.Extra != nil {
		owner = ownerOf(req.Extra.Header)
	}
	if id == "" {
		id = h.connection(req.Session)
	}
	return h.sessionCall(ctx, id, owner, who, request, fresh)
}

// answer turns a run's output and error into run_python's result. notice,
// when set, heads it; session is the session the run was in, or nil.
func (h *handler) answer(ctx context.Context, out *spine.Output, runErr error, notice string, session *spine.Session) (*mcp.CallToolResult, error) {
	res, err := h.tool.Answer(ctx, out, runErr)
	if err != nil {
		return nil, err
	}
	res.Notice = notice
	if res.IsError && spine.Classify(runErr) == spine.OutcomeTimeout && session != nil && errors.Is(session.Err(), spine.ErrSessionLost) {
		res.Error += ". Stopping it lost the Python state of earlier calls: your next call runs in a new, empty session"
	}
	return toolResult(res)
}

// toolResult is res as an MCP tool result: its text, then its images, then
// the other files the program left as embedded resources; a success has the
// Result as its structuredContent too.
func toolResult(res *codemode.Result) (*mcp.CallToolResult, error) {
	content := []mcp.Content{&mcp.TextContent{Text: res.Text()}}
	shown := map[string]bool{}
	for _, im := range res.Images {
		content = append(content, &mcp.ImageContent{Data: im.Data, MIMEType: im.MIMEType})
		if im.Source == "file" {
			shown[im.Name] = true
		}
	}
	if res.Output != nil {
		for _, f := range res.Output.Files {
			if !shown[f.Name] {
				content = append(content, fileResource(f))
			}
		}
	}
	if res.IsError {
		return &mcp.CallToolResult{Content: content, IsError: true}, nil
	}
	return &mcp.CallToolResult{Content: content, StructuredContent: res}, nil
}
