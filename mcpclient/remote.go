package mcpclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spine-run/spine"
)

// Remote is an MCP server that a request names, reached over streamable
// HTTP for the one run it comes with (spine serve's mcp_servers): its
// tools are that run's, as Name.tool, the way Connect makes them.
type Remote struct {
	// Name is the namespace of the server's tools: a Python identifier.
	Name string `json:"name"`
	// URL is the server's streamable HTTP endpoint, http or https, on a
	// host of the AllowList.
	URL string `json:"url"`
	// Headers are sent with every request to the server (an
	// Authorization, often). They never appear in an error or a log: the
	// errors of Open and of the tools' calls have them taken out, and the
	// URL's path and query too (a server's URL may hold a key).
	Headers map[string]string `json:"headers"`

	// Type and AuthorizationToken are the members of an MCP server in
	// the Anthropic API's mcp_servers, so that a request may carry the
	// same object: Type, when set, must be "url"; AuthorizationToken is
	// sent as "Authorization: Bearer <token>" (not with an Authorization
	// header too), and kept out of errors as Headers are.
	Type               string `json:"type,omitempty"`
	AuthorizationToken string `json:"authorization_token,omitempty"`
}

// RemoteOptions bound what the servers of one request may take. The zero
// value of each field is its default.
type RemoteOptions struct {
	// Allow is the hosts the servers may be on (AllowList); none: every
	// Remote is refused.
	Allow *AllowList
	// MaxServers is how many servers a request may name (default 8).
	MaxServers int
	// MaxTools is how many tools a server may list (default 256): a server
	// that lists more is refused, not cut.
	MaxTools int
	// MaxSchema bounds a tool's input schema, and its output schema, in
	// bytes (default 64 KiB).
	MaxSchema int
	// MaxResponse bounds each HTTP response of a server, in bytes (default
	// 8 MiB): a tool list, a call's result, an error's body.
	MaxResponse int64
	// Timeout bounds connecting to a server and listing its tools, each
	// server on its own, all at once (default 10s).
	Timeout time.Duration
}

// Defaults of RemoteOptions.
const (
	DefaultMaxRemoteServers  = 8
	DefaultMaxRemoteTools    = 256
	DefaultMaxRemoteSchema   = 64 << 10
	DefaultMaxRemoteResponse = 8 << 20
	DefaultRemoteTimeout     = 10 * time.Second

	maxRemoteHeaders     = 32
	maxRemoteHeaderBytes = 16 << 10
	maxRemoteRedirects   = 3
)

// Remotes opens the MCP servers that requests name, within the bounds of
// its RemoteOptions. It is safe for concurrent use.
type Remotes struct {
	opts RemoteOptions
}

// NewRemotes returns Remotes with opts (nil: the defaults, which allow no
// host).
func NewRemotes(opts *RemoteOptions) *Remotes {
	o := RemoteOptions{}
	if opts != nil {
		o = *opts
	}
	if o.MaxServers <= 0 {
		o.MaxServers = DefaultMaxRemoteServers
	}
	if o.MaxTools <= 0 {
		o.MaxTools = DefaultMaxRemoteTools
	}
	if o.MaxSchema <= 0 {
		o.MaxSchema = DefaultMaxRemoteSchema
	}
	if o.MaxResponse <= 0 {
		o.MaxResponse = DefaultMaxRemoteResponse
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultRemoteTimeout
	}
	return &Remotes{opts: o}
}

// RemoteError is why the servers of a request were not opened: one of them
// (Index) could not be, or the list itself (Index -1) is refused. Its text
// names the server and its origin (scheme, host and port), never its
// headers, path or query.
type RemoteError struct {
	Index  int    // in the request's list; -1: the list
	Server string // the server's name
	Origin string // scheme://host:port of its URL, "" when it does not parse
	// Refused says the request is at fault (a bad name, URL or header, a
	// host the AllowList lacks, too many servers); else the server is (it
	// cannot be reached, answers an error, lists nothing or too much).
	Refused bool
	Err     error
}

func (e *RemoteError) Error() string {
	name := e.Server
	if name == "" {
		name = `""`
	}
	switch {
	case e.Index < 0:
		return e.Err.Error()
	case e.Origin == "":
		return fmt.Sprintf("mcp server %s: %v", name, e.Err)
	}
	return fmt.Sprintf("mcp server %s (%s): %v", name, e.Origin, e.Err)
}

func (e *RemoteError) Unwrap() error { return e.Err }

// checked is a Remote that Check let through.
type checked struct {
	Remote
	url    *url.URL
	origin string
}

// Check says what is wrong with servers, as a *RemoteError with Refused
// set, without reaching any of them: their number, each one's name
// (an identifier, each once), URL (http or https, no user information, on
// a host of the AllowList) and headers (at most 32, 16 KiB in all, none of
// those the protocol sets: Host, Content-Type, Mcp-Session-Id, ...).
func (r *Remotes) Check(servers []Remote) error {
	_, err := r.check(servers)
	return err
}

func (r *Remotes) check(servers []Remote) ([]checked, error) {
	if len(servers) > r.opts.MaxServers {
		return nil, &RemoteError{Index: -1, Refused: true, Err: fmt.Errorf("%d MCP servers, over the limit of %d a request", len(servers), r.opts.MaxServers)}
	}
	out := make([]checked, len(servers))
	seen := make(map[string]bool, len(servers))
	for i, s := range servers {
		fail := func(err error) error {
			return &RemoteError{Index: i, Server: s.Name, Origin: out[i].origin, Refused: true, Err: err}
		}
		if u, err := url.Parse(s.URL); err == nil && u.Host != "" {
			out[i].url, out[i].origin = u, origin(u)
		}
		switch {
		case s.Name == "":
			return nil, fail(errors.New(`"name" is missing`))
		case strings.Contains(s.Name, ".") || spine.ValidName(s.Name) != nil:
			return nil, fail(errors.New(`"name" must be a Python identifier, the namespace of the server's tools`))
		case seen[s.Name]:
			return nil, fail(errors.New("named twice"))
		case s.URL == "":
			return nil, fail(errors.New(`"url" is missing`))
		case out[i].url == nil:
			return nil, fail(errors.New(`"url" is not a URL with a host`))
		}
		seen[s.Name] = true
		if err := r.opts.Allow.check(out[i].url); err != nil {
			return nil, fail(err)
		}
		headers, err := withToken(s)
		if err == nil {
			err = checkHeaders(headers)
		}
		if err != nil {
			return nil, fail(err)
		}
		s.Headers, s.AuthorizationToken = headers, ""
		out[i].Remote = s
	}
	return out, nil
}

// origin is scheme://host:port of u, the port always written: what an
// error may show of a URL.
func origin(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = fmt.Sprint(defaultPort(u.Scheme))
	}
	host := u.Hostname()
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	return u.Scheme + "://" + host + ":" + port
}

// withToken returns the headers of s with its AuthorizationToken, and
// checks its Type.
func withToken(s Remote) (map[string]string, error) {
	if s.Type != "" && s.Type != "url" {
		return nil, fmt.Errorf(`"type" is %q: a server is reached at its URL, "url"`, s.Type)
	}
	if s.AuthorizationToken == "" {
		return s.Headers, nil
	}
	headers := make(map[string]string, len(s.Headers)+1)
	for k, v := range s.Headers {
		if http.CanonicalHeaderKey(k) == "Authorization" {
			return nil, errors.New(`an "authorization_token" and an Authorization header: give one`)
		}
		headers[k] = v
	}
	headers["Authorization"] = "Bearer " + s.AuthorizationToken
	return headers, nil
}

// reserved are the headers a request may not set: the protocol's, the
// connection's and the proxy's.
var reserved = map[string]bool{
	"Host": true, "Content-Type": true, "Content-Length": true, "Content-Encoding": true, "Transfer-Encoding": true,
	"Connection": true, "Keep-Alive": true, "Upgrade": true, "Te": true, "Trailer": true, "Accept": true,
	"Accept-Encoding": true, "Expect": true, "Proxy-Authorization": true, "Proxy-Connection": true,
	"Mcp-Session-Id": true, "Mcp-Protocol-Version": true, "Last-Event-Id": true,
}

func checkHeaders(headers map[string]string) error {
	if len(headers) > maxRemoteHeaders {
		return fmt.Errorf("%d headers, over the limit of %d", len(headers), maxRemoteHeaders)
	}
	size := 0
	for k, v := range headers {
		size += len(k) + len(v)
		if !validHeaderName(k) {
			return fmt.Errorf("header %q: not a header name", k)
		}
		if reserved[http.CanonicalHeaderKey(k)] {
			return fmt.Errorf("header %q is set by the protocol, not by a request", k)
		}
		if strings.ContainsAny(v, "\r\n\x00") {
			return fmt.Errorf("header %q: its value holds a line break or NUL", k)
		}
	}
	if size > maxRemoteHeaderBytes {
		return fmt.Errorf("the headers are %d bytes, over the limit of %d", size, maxRemoteHeaderBytes)
	}
	return nil
}

// validHeaderName reports whether k is an HTTP token.
func validHeaderName(k string) bool {
	if k == "" {
		return false
	}
	for _, c := range []byte(k) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// RemoteTools are the tools of the servers of one request, over sessions
// of their own: nothing is shared with another request's. Close them when
// the run has ended.
type RemoteTools struct {
	tools    spine.Manifest
	sessions []*mcp.ClientSession
	closers  []func()
	once     sync.Once
}

// Open checks servers (Check), connects to each, all at once, and lists
// their tools, each within the Timeout. It returns their tools, as
// Connect makes them under each server's name, or the *RemoteError of the
// first server, in the list's order, that could not be opened; then none
// stays open. Each server gets its own HTTP connections, which follow
// redirects within the URL's origin only (3 at most), go to no proxy, and
// connect by name to no unspecified, multicast or link-local address (a
// cloud's metadata service).
func (r *Remotes) Open(ctx context.Context, servers []Remote) (*RemoteTools, error) {
	list, err := r.check(servers)
	if err != nil || len(list) == 0 {
		return nil, err
	}
	type opened struct {
		tools   spine.Manifest
		session *mcp.ClientSession
		close   func()
		err     error
	}
	results := make([]opened, len(list))
	var wg sync.WaitGroup
	for i, s := range list {
		wg.Go(func() {
			o := &results[i]
			o.tools, o.session, o.close, o.err = r.open(ctx, s)
			if o.err != nil {
				o.err = &RemoteError{Index: i, Server: s.Name, Origin: s.origin, Err: o.err}
			}
		})
	}
	wg.Wait()
	t := &RemoteTools{tools: spine.Manifest{}}
	for _, o := range results {
		if o.session != nil {
			t.sessions = append(t.sessions, o.session)
		}
		if o.close != nil {
			t.closers = append(t.closers, o.close)
		}
		if err == nil {
			err = o.err
		}
		for name, spec := range o.tools {
			t.tools[name] = spec
		}
	}
	if err != nil {
		t.Close()
		return nil, err
	}
	return t, nil
}

// Tools returns the servers' tools as manifest entries (a new map each
// time; nil for none).
func (t *RemoteTools) Tools() spine.Manifest {
	if t == nil || len(t.tools) == 0 {
		return nil
	}
	m := make(spine.Manifest, len(t.tools))
	for name, spec := range t.tools {
		m[name] = spec
	}
	return m
}

// Close ends every session (an HTTP DELETE, which the SDK bounds by 5s)
// and the connections. Later calls of the tools fail. It is safe to call
// more than once, and on nil.
func (t *RemoteTools) Close() {
	if t == nil {
		return
	}
	t.once.Do(func() {
		for _, s := range t.sessions {
			s.Close()
		}
		for _, c := range t.closers {
			c()
		}
	})
}

// open connects to one server and lists its tools; close releases its
// connections once its session is closed.
func (r *Remotes) open(ctx context.Context, s checked) (spine.Manifest, *mcp.ClientSession, func(), error) {
	red := newRedactor(s.Remote, s.url)
	base := r.httpTransport(s.url)
	over := new(atomic.Bool)
	red.over, red.max = over, r.opts.MaxResponse
	client := &http.Client{
		Transport: remoteRoundTripper{base: base, headers: s.Headers, origin: s.origin, max: r.opts.MaxResponse, over: over},
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if o := origin(req.URL); o != s.origin {
				return fmt.Errorf("redirected to %s: Spine follows an MCP server's redirects within its origin only", o)
			}
			if len(via) > maxRemoteRedirects {
				return fmt.Errorf("redirected more than %d times", maxRemoteRedirects)
			}
			return nil
		},
	}
	closeConns := base.CloseIdleConnections
	watch := newTaskWatch()
	transport := watch.watch(&mcp.StreamableClientTransport{Endpoint: s.URL, HTTPClient: client, DisableStandaloneSSE: true})
	ctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	session, err := newClient().Connect(ctx, transport, nil)
	if err != nil {
		return nil, nil, closeConns, red.err("connecting", err, ctx, r.opts.Timeout)
	}
	tools, err := r.list(ctx, session)
	if err != nil {
		return nil, session, closeConns, red.err("listing its tools", err, ctx, r.opts.Timeout)
	}
	// The schemas' sizes before they are compiled to check arguments.
	for _, tool := range tools {
		for what, schema := range map[string]any{"input": tool.InputSchema, "output": tool.OutputSchema} {
			if encoded, err := json.Marshal(schema); err == nil && len(encoded) > r.opts.MaxSchema {
				return nil, session, closeConns, fmt.Errorf("tool %q: its %s schema is %d bytes, over the limit of %d", red.text(tool.Name), what, len(encoded), r.opts.MaxSchema)
			}
		}
	}
	call := func(name string, _ bool) spine.Tool { return red.tool(caller(session, name)) }
	m, err := manifest(call, s.Name, tools, nil, watch)
	if err != nil {
		return nil, session, closeConns, errors.New(red.text(strings.TrimPrefix(err.Error(), "mcpclient: "+label(s.Name)+": ")))
	}
	if len(m) == 0 {
		return nil, session, closeConns, errors.New("it lists no tool Spine can call")
	}
	return m, session, closeConns, nil
}

// list lists the server's tools, following pagination, up to MaxTools.
func (r *Remotes) list(ctx context.Context, session *mcp.ClientSession) ([]*mcp.Tool, error) {
	var tools []*mcp.Tool
	for tool, err := range session.Tools(ctx, nil) {
		if err != nil {
			return nil, err
		}
		if len(tools) == r.opts.MaxTools {
			return nil, fmt.Errorf("it lists more than %d tools, the limit", r.opts.MaxTools)
		}
		tools = append(tools, tool)
	}
	return tools, nil
}
