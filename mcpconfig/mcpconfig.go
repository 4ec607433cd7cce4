// Package mcpconfig loads the config file that names the MCP servers whose
// tools Python programs may call: the file spine run, tools, serve and mcp
// take with --config. Load reads and checks the file, starts or connects to
// every server at once (mcpclient.Dial, which keeps each one connected), and
// returns a Toolset: the servers' tools as one spine.Manifest, their health,
// and Close.
//
// The file is one JSON object:
//
//	{
//	  "servers": {
//	    "github": {
//	      "command": ["docker", "run", "-i", "--rm", "-e", "GITHUB_PERSONAL_ACCESS_TOKEN", "ghcr.io/github/github-mcp-server"],
//	      "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "${GITHUB_TOKEN}"},
//	      "early_reads": ["search_issues", "get_issue"]
//	    },
//	    "docs": {
//	      "url": "http://127.0.0.1:9000/mcp",
//	      "headers": {"Authorization": "Bearer ${DOCS_TOKEN}"},
//	      "timeout": "10s"
//	    }
//	  }
//	}
//
// Each key of "servers" is the namespace of that server's tools
// (github.search_issues): a Python identifier that is not a keyword, nor the
// name of one of Options.Reserved. A server has either a "command" (program
// and arguments, spoken to over stdio; with "env" and "dir") or a "url"
// (streamable HTTP; with "headers"), and, for both kinds, "early_reads" (the
// MCP names of the tools that may be started before the program reaches them)
// and "timeout" (to connect and list the tools, and for each reconnection;
// default 30s). Unknown fields are errors.
//
// In "env" and "headers" values, ${NAME} is replaced by the process's
// environment variable NAME (one that is not set is an error), so that secrets
// need not be written in the file. A command gets the file's env and, of the
// process's own environment, only HOME, PATH, USER, LOGNAME, SHELL and TERM
// (those set): the process's other secrets are not passed on.
//
// Errors that are the file's fault — it cannot be read, is not valid, names a
// reserved tool — match ErrConfig; a server that cannot be started, reached or
// listed is another error.
package mcpconfig

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"os"
	"os/exec"
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

	// Logger, if not nil, hears of servers' sessions lost and regained.
	Logger *slog.Logger

	// Stderr receives the standard error (the logs) of the servers'
	// commands; nil means os.Stderr.
	Stderr io.Writer
}

// A Toolset is the configured MCP servers, kept connected, and their tools.
// A nil *Toolset has no servers.
type Toolset struct {
	names   []string // in order
	servers []*mcpclient.Server
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
	cfg, err := read(path)
	if err != nil {
		return nil, err
	}
	for name := range cfg.Servers {
		for _, tool := range opts.Reserved {
			if tool == name || strings.HasPrefix(tool, name+".") {
				return nil, fmt.Errorf("%w %s: server %q: the name is taken by the built-in tool %s", ErrConfig, path, name, tool)
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
// reconnecting).
func (t *Toolset) Health() map[string]string {
	if t == nil {
		return map[string]string{}
	}
	h := make(map[string]string, len(t.servers))
	for i, s := range t.servers {
		h[t.names[i]] = ""
		if err := s.Err(); err != nil {
			h[t.names[i]] = err.Error()
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
		t.err = errors.Join(errs...)
	})
	return t.err
}

// config is the file's JSON.
type config struct {
	Servers map[string]server `json:"servers"`
}

// server is one MCP server: a command run with stdio, or a URL spoken to with
// streamable HTTP.
type server struct {
	Command []string          `json:"command,omitempty"` // program and arguments, stdio transport
	Env     map[string]string `json:"env,omitempty"`     // added to the few variables passed on (envVars)
	Dir     string            `json:"dir,omitempty"`     // working folder of the command

	URL     string            `json:"url,omitempty"`     // streamable HTTP endpoint
	Headers map[string]string `json:"headers,omitempty"` // sent with every HTTP request

	EarlyReads []string `json:"early_reads,omitempty"` // MCP tool names that may be read early

	Timeout string `json:"timeout,omitempty"` // to connect and list tools; default 30s
}

const defaultTimeout = 30 * time.Second

// read reads and checks the file at path, with ${NAME} expanded.
func read(path string) (*config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	var cfg config
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cfg); err != nil {
		return nil, fmt.Errorf("%w %s: %w", ErrConfig, path, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w %s: more than one JSON value", ErrConfig, path)
	}
	for name, s := range cfg.Servers {
		if mcpclient.PythonName(name) != name {
			return nil, fmt.Errorf("%w %s: server name %q must be a Python identifier: it is the namespace of its tools", ErrConfig, path, name)
		}
		switch {
		case len(s.Command) > 0 && s.URL != "":
			return nil, fmt.Errorf("%w %s: server %q has both a command and a url", ErrConfig, path, name)
		case len(s.Command) == 0 && s.URL == "":
			return nil, fmt.Errorf("%w %s: server %q needs a command (stdio) or a url (streamable HTTP)", ErrConfig, path, name)
		case len(s.Command) > 0 && len(s.Headers) > 0:
			return nil, fmt.Errorf("%w %s: server %q: headers are for a url", ErrConfig, path, name)
		case s.URL != "" && (len(s.Env) > 0 || s.Dir != ""):
			return nil, fmt.Errorf("%w %s: server %q: env and dir are for a command", ErrConfig, path, name)
		}
		if s.URL != "" {
			if u, err := url.Parse(s.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return nil, fmt.Errorf("%w %s: server %q: url %q is not an http(s) URL", ErrConfig, path, name, s.URL)
			}
		}
		for _, values := range []map[string]string{s.Env, s.Headers} {
			for k, v := range values {
				expanded, err := expandVars(v)
				if err != nil {
					return nil, fmt.Errorf("%w %s: server %q: %s: %v", ErrConfig, path, name, k, err)
				}
				values[k] = expanded
			}
		}
		if s.Timeout != "" {
			if d, err := time.ParseDuration(s.Timeout); err != nil || d <= 0 {
				return nil, fmt.Errorf("%w %s: server %q: bad timeout %q", ErrConfig, path, name, s.Timeout)
			}
		}
	}
	return &cfg, nil
}

// expandVars replaces each ${NAME} in s with the environment variable NAME. A
// variable that is not set is an error; a "$" not followed by "{" stays as
// it is.
func expandVars(s string) (string, error) {
	var b strings.Builder
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			b.WriteString(s)
			return b.String(), nil
		}
		end := strings.IndexByte(s[i:], '}')
		if end < 0 {
			return "", fmt.Errorf("unclosed ${ in %q", s)
		}
		name := s[i+2 : i+end]
		value, ok := os.LookupEnv(name)
		if !ok || name == "" {
			return "", fmt.Errorf("environment variable %q is not set", name)
		}
		b.WriteString(s[:i])
		b.WriteString(value)
		s = s[i+end+1:]
	}
}

// connectAll connects to every server at once and lists its tools. On any
// failure it closes the servers it connected and returns the errors in name
// order.
func connectAll(ctx context.Context, cfg *config, opts *Options) (*Toolset, error) {
	t := &Toolset{names: slices.Sorted(maps.Keys(cfg.Servers))}
	t.servers = make([]*mcpclient.Server, len(t.names))
	errs := make([]error, len(t.names))
	var wg sync.WaitGroup
	for i, name := range t.names {
		wg.Go(func() {
			t.servers[i], errs[i] = connect(ctx, name, cfg.Servers[name], opts)
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
// tools have the server's timeout, and so does each reconnection.
func connect(ctx context.Context, name string, s server, opts *Options) (*mcpclient.Server, error) {
	timeout := defaultTimeout
	if s.Timeout != "" {
		timeout, _ = time.ParseDuration(s.Timeout) // checked by read
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var transport func() mcp.Transport
	if len(s.Command) > 0 {
		stderr := opts.Stderr
		if stderr == nil {
			stderr = os.Stderr
		}
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
			return &mcp.StreamableClientTransport{Endpoint: s.URL, HTTPClient: client, DisableStandaloneSSE: true}
		}
	}
	return mcpclient.Dial(ctx, transport, name, &mcpclient.Options{EarlyReads: s.EarlyReads, ConnectTimeout: timeout, Logger: opts.Logger})
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
