// Package mcpconfig loads the config file that names the MCP servers whose
// tools Python programs may call: the file spine run, tools, serve and mcp
// take with --config. Load reads and checks the file, starts or connects to
// every server at once (mcpclient.Dial, which keeps each one connected), and
// returns a Toolset: the servers' tools as one spine.Manifest, their health,
// and Close.
//
// The file is the "mcpServers" object MCP clients and servers' READMEs use,
// pasted as it is; Spine's own keys sit beside the clients' in an entry:
//
//	{
//	  "mcpServers": {
//	    "github": {
//	      "command": "docker",
//	      "args": ["run", "-i", "--rm", "-e", "GITHUB_PERSONAL_ACCESS_TOKEN", "ghcr.io/github/github-mcp-server"],
//	      "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "${GITHUB_TOKEN}"},
//	      "tools": ["search_issues", "get_issue"],
//	      "early_reads": ["search_issues", "get_issue"]
//	    },
//	    "docs": {
//	      "type": "http",
//	      "url": "http://127.0.0.1:9000/mcp",
//	      "headers": {"Authorization": "Bearer ${DOCS_TOKEN}"},
//	      "timeout": "10s"
//	    }
//	  }
//	}
//
// The top-level key may also be "servers" (Spine's earlier name, and one
// client's); other top-level keys (a client's own settings) are ignored.
//
// An entry has either a "command" (stdio: a program, with "args", "env" and
// "dir" or "cwd"; Spine's earlier form, an array of program and arguments,
// also works) or a "url" (streamable HTTP, or the older HTTP+SSE transport
// when "type" is "sse"; with "headers"). "type" ("stdio", "http",
// "streamable-http", "sse"; or "transportType"), when present, must agree.
// "httpUrl" and "serverUrl", as two clients spell the URL, are read as
// "url". "disabled": true leaves the server out.
//
// Spine's keys:
//
//   - "namespace": the Python name of the server's tools (ns.tool_name);
//     default, the entry's name made an identifier ("brave-search" is
//     brave_search). It must not be a keyword, a builtin, a name of
//     Options.Reserved, nor a module of the Guest's standard library (a
//     program's "import time" would hide a server named time): the error
//     says which "namespace" to set.
//   - "tools": the only tools (by their MCP names) the program gets;
//     "exclude_tools": tools it does not get. One or the other. A name the
//     server does not have is an error. ("includeTools" and "excludeTools",
//     one client's names, are read as these.)
//   - "early_reads": the tools that may be started before the program
//     reaches them (only tools that read; see mcpclient.Options).
//   - "timeout": to connect and list the tools, and for each reconnection,
//     as a duration ("10s"; default 30s). A number is ignored: clients
//     disagree on its unit.
//
// Keys clients write that mean nothing to Spine ("autoApprove",
// "alwaysAllow", "disabledTools", "trust", "description", ...) and any other
// unknown key are ignored (Options.Logger hears which); an unknown key that
// looks like a misspelt Spine key ("early_read") is an error, and so is
// "envFile" (Spine does not read it: put the variables in "env").
//
// In "env" and "headers" values, ${NAME} (or ${env:NAME}) is replaced by the
// process's environment variable NAME (one that is not set is an error), so
// that secrets need not be written in the file. A command gets the file's
// env and, of the process's own environment, only HOME, PATH, USER, LOGNAME,
// SHELL and TERM (those set): the process's other secrets are not passed on.
//
// A tool whose MCP execution.taskSupport is "required" cannot be called by
// Spine and is left out of the manifest (and so of the stubs); the Logger
// hears of it. Naming it in "tools" or "early_reads" is an error.
//
// A command's standard error (its logs) goes to Options.Stderr and to a file
// in Options.LogDir, or nowhere.
//
// Errors that are the file's fault — it cannot be read, is not valid, names a
// reserved tool — match ErrConfig; a server that cannot be started, reached or
// listed is another error.
package mcpconfig

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spine-run/spine"
	"github.com/spine-run/spine/mcpclient"
)

// ErrConfig is matched (errors.Is) by every error of Load that is the config
// file's fault, not a server's.
var ErrConfig = errors.New("config")

// Options are the caller's choices for Load. A nil *Options means none.
type Options struct {
	// Reserved are the names of tools the caller adds to the manifest
	// itself ("lookup", "prices.list"). A server named like one of them, or
	// like its namespace ("prices"), is a config error.
	Reserved []string

	// Logger, if not nil, hears of servers' sessions lost and regained,
	// and (at Info) of what Load left out: keys of the file it ignored,
	// disabled servers, tools that need MCP tasks.
	Logger *slog.Logger

	// Stderr, if not nil, receives the standard error (the logs) of the
	// servers' commands, each line after "[namespace] ".
	Stderr io.Writer

	// StartDown keeps Load from failing when a server cannot be reached or
	// listed: that server starts down and connects in the background, with
	// backoff (mcpclient.Options.StartDown). Its tools in the Manifest are
	// the file's "tools", as stand-ins that call the server's once it is
	// connected; without "tools" it has none, until the next Load, and
	// Health says so once it is connected. (A long-running command takes
	// this: one shared server that is down must not stop every replica.)
	StartDown bool

	// CallerOf, if not nil, names the caller a tool call is made for (a
	// token's name), as mcpclient.Options.CallerOf: a caller whose calls of
	// a tool break a server again and again is refused those calls.
	CallerOf func(ctx context.Context) string

	// LogDir, if not "", is a folder (created if need be) where the
	// standard error of each server's command goes to NAMESPACE.log, begun
	// anew by each Load and kept across the command's restarts.
	//
	// With neither Stderr nor LogDir, the servers' standard error is
	// discarded: some servers write many lines of warnings each run, which
	// are not the user's business unless something fails.
	LogDir string
}

// A Toolset is the configured MCP servers, kept connected, and their tools.
// A nil *Toolset has no servers.
type Toolset struct {
	names   []string // in order
	servers []*mcpclient.Server
	logs    []*os.File // LogDir's files, closed after the servers
	once    sync.Once
	err     error // of Close
}

// Load reads the config file at path, starts or connects to every server it
// names at once, and lists their tools. ctx bounds the connecting (each
// server also has its own timeout); the servers then live until Close. When
// a server fails, Load closes the others and returns the errors of every
// server that failed, in name order.
func Load(ctx context.Context, path string, opts *Options) (*Toolset, error) {
	if opts == nil {
		opts = &Options{}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	cfg, err := decode(data, path)
	if err != nil {
		return nil, err
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	for _, note := range cfg.Notes {
		logger.Info("mcp config: "+note, "file", path)
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.Servers)) {
		for _, tool := range opts.Reserved {
			if tool == name || strings.HasPrefix(tool, name+".") {
				return nil, fmt.Errorf("%w %s: server %q: the namespace %s is taken by the built-in tool %s: set \"namespace\" to another", ErrConfig, path, cfg.Servers[name].Entry, name, tool)
			}
		}
	}
	t, err := connectAll(ctx, cfg, opts)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// Manifest returns every server's tools, each under its server's name (a new
// map each time).
func (t *Toolset) Manifest() spine.Manifest {
	m := spine.Manifest{}
	if t == nil {
		return m
	}
	for _, s := range t.servers {
		maps.Copy(m, s.Tools())
	}
	return m
}

// Health maps each server's name to "" while it is connected, else to the
// text of the error its tools fail with (a *mcpclient.DownError while it is
// reconnecting), or, for a server down at Load (Options.StartDown) and
// connected since without stand-ins, to a text saying its tools come with
// the next Load.
func (t *Toolset) Health() map[string]string {
	if t == nil {
		return map[string]string{}
	}
	h := make(map[string]string, len(t.servers))
	for i, s := range t.servers {
		h[t.names[i]] = ""
		if err := s.Err(); err != nil {
			h[t.names[i]] = err.Error()
		} else if down, _ := s.StartedDown(); down && len(s.Tools()) == 0 {
			h[t.names[i]] = fmt.Sprintf("mcp server %s connected after spine started: its tools come with the next start (name them in \"tools\" to have them at once)", t.names[i])
		}
	}
	return h
}

// Close closes every server at once: it stops their reconnecting and ends
// their commands. Later calls of their tools fail. It is safe to call more
// than once and concurrently; every call returns the first one's error.
func (t *Toolset) Close() error {
	if t == nil {
		return nil
	}
	t.once.Do(func() {
		errs := make([]error, len(t.servers))
		var wg sync.WaitGroup
		for i, s := range t.servers {
			if s != nil {
				wg.Go(func() { errs[i] = s.Close() })
			}
		}
		wg.Wait()
		for _, f := range t.logs {
			errs = append(errs, f.Close())
		}
		t.err = errors.Join(errs...)
	})
	return t.err
}

// connectAll connects to every server at once and lists its tools. On any
// failure it closes the servers it connected and returns the errors in name
// order.
func connectAll(ctx context.Context, cfg *config, opts *Options) (*Toolset, error) {
	t := &Toolset{names: slices.Sorted(maps.Keys(cfg.Servers))}
	t.servers = make([]*mcpclient.Server, len(t.names))
	stderrs := make([]io.Writer, len(t.names))
	var shared *lockedWriter
	if opts.Stderr != nil {
		shared = &lockedWriter{w: opts.Stderr}
	}
	for i, name := range t.names {
		if len(cfg.Servers[name].Command) == 0 {
			continue
		}
		var ws []io.Writer
		if shared != nil {
			ws = append(ws, &prefixWriter{prefix: "[" + name + "] ", w: shared})
		}
		if opts.LogDir != "" {
			f, err := openLog(opts.LogDir, name)
			if err != nil {
				t.Close()
				return nil, err
			}
			t.logs = append(t.logs, f)
			ws = append(ws, f)
		}
		switch len(ws) {
		case 0:
		case 1:
			stderrs[i] = ws[0]
		default:
			stderrs[i] = io.MultiWriter(ws...)
		}
	}
	errs := make([]error, len(t.names))
	var wg sync.WaitGroup
	for i, name := range t.names {
		wg.Go(func() {
			t.servers[i], errs[i] = connect(ctx, name, cfg.Servers[name], stderrs[i], opts)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Close()
		return nil, err
	}
	return t, nil
}

// envVars are the variables of the process's environment that a server's
// command gets, when set, besides the config's env: the process's own secrets
// (the ones the config's ${NAME} reads, keys of other servers) are not passed
// on.
var envVars = []string{"HOME", "PATH", "USER", "LOGNAME", "SHELL", "TERM"}

// commandEnv is the environment of a server's command with the config's env.
func commandEnv(env map[string]string) []string {
	out := []string{} // not nil: nil would inherit everything
	for _, name := range envVars {
		if v, ok := os.LookupEnv(name); ok {
			out = append(out, name+"="+v)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(env)) {
		out = append(out, name+"="+env[name])
	}
	return out
}

// connect dials one server: its first connection and the listing of its
// tools have the server's timeout, and so does each reconnection. stderr
// (nil: discarded) gets a command's standard error.
func connect(ctx context.Context, name string, s *server, stderr io.Writer, opts *Options) (*mcpclient.Server, error) {
	timeout := s.Timeout
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var transport func() mcp.Transport
	if len(s.Command) > 0 {
		transport = func() mcp.Transport {
			// Not CommandContext: the process lives as long as the session,
			// not as long as a connection's context.
			cmd := exec.Command(s.Command[0], s.Command[1:]...)
			cmd.Dir = s.Dir
			cmd.Env = commandEnv(s.Env)
			cmd.Stderr = stderr
			return &mcp.CommandTransport{Command: cmd, TerminateDuration: 2 * time.Second}
		}
	} else {
		client := http.DefaultClient
		if len(s.Headers) > 0 {
			client = &http.Client{Transport: headerTransport{s.Headers, configuredHost(s.URL), http.DefaultTransport}}
		}
		transport = func() mcp.Transport {
			if s.SSE {
				return &mcp.SSEClientTransport{Endpoint: s.URL, HTTPClient: client}
			}
			return &mcp.StreamableClientTransport{Endpoint: s.URL, HTTPClient: client, DisableStandaloneSSE: true}
		}
	}
	return mcpclient.Dial(ctx, transport, name, &mcpclient.Options{
		EarlyReads:     s.EarlyReads,
		Tools:          s.Tools,
		ExcludeTools:   s.ExcludeTools,
		ConnectTimeout: timeout,
		Logger:         opts.Logger,
		CallerOf:       opts.CallerOf,
		StartDown:      opts.StartDown,
	})
}

// openLog opens (begins anew) the log file of the server name in dir.
func openLog(dir, name string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("server logs: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, name+".log"), os.O_CREATE|os.O_TRUNC|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("server logs: %w", err)
	}
	return f, nil
}

// lockedWriter is a writer several servers' streams share.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// prefixWriter writes each whole line after prefix (so that servers' lines
// do not interleave mid-line); a last line without a newline waits for the
// next write, and a line longer than 64 KiB is cut.
type prefixWriter struct {
	prefix string
	w      io.Writer
	line   []byte
}

const maxLogLine = 64 << 10

func (p *prefixWriter) Write(b []byte) (int, error) {
	n := len(b)
	for len(b) > 0 {
		chunk, whole := b, false
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			chunk, whole = b[:i+1], true
		}
		if room := maxLogLine - len(p.line); len(chunk) > room {
			chunk, whole = chunk[:room], false
			p.line = append(p.line, chunk...)
			p.line = append(p.line, '\n') // cut: the rest is a line of its own
			b = b[len(chunk):]
			if err := p.flush(); err != nil {
				return n, err
			}
			continue
		}
		p.line = append(p.line, chunk...)
		b = b[len(chunk):]
		if whole {
			if err := p.flush(); err != nil {
				return n, err
			}
		}
	}
	return n, nil
}

func (p *prefixWriter) flush() error {
	_, err := p.w.Write(append([]byte(p.prefix), p.line...))
	p.line = p.line[:0]
	return err
}

// headerTransport adds the configured headers (often a secret) to every
// request to the configured host, and to no other: a redirect elsewhere goes
// without them.
type headerTransport struct {
	headers map[string]string
	host    string // scheme://host[:port] of the configured URL
	base    http.RoundTripper
}

func (t headerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme+"://"+req.URL.Host != t.host {
		return t.base.RoundTrip(req)
	}
	req = req.Clone(req.Context())
	for k, v := range t.headers {
		req.Header.Set(k, v)
	}
	return t.base.RoundTrip(req)
}

// configuredHost is the scheme://host[:port] of rawURL ("" if it does not parse).
func configuredHost(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return ""
	}
	return u.Scheme + "://" + u.Host
}
