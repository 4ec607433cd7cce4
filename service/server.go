// Package service is Spine's HTTP API: it runs Python programs sent over HTTP
// with a spine.Runner, admits only as many runs at once as it has slots, and
// exports Prometheus metrics.
//
//	POST   /v1/run                    {"source", "inputs", "timeout_ms", "early_reads", "files"} → run result
//	POST   /v1/run/stream             the program as the (chunked) request body: prefix mode
//	POST   /v1/sessions               → 201 {"id": "..."}: a session (sessions.go)
//	POST   /v1/sessions/{id}/run      as /v1/run, in the session
//	POST   /v1/runs/{run_id}/tool_results  the results of a paused run's client tools (a request's "tools"; paused.go)
//	POST   /v1/runs/{run_id}/approvals     the caller's decision on a call waiting for approval (approvals.go)
//	GET    /v1/sessions/{id}/snapshot → the session's snapshot, application/octet-stream
//	POST   /v1/sessions/restore       a snapshot as the body → 201 {"id": "..."}
//	DELETE /v1/sessions/{id}          → 204
//	GET    /v1/tool                   run_python's definition for a model (with Options.Tool; tool.go)
//	POST   /v1/tool                   {"tools"} → the same, for calls that bring client tools (pausedtool.go)
//	POST   /v1/tool/call              a model's run_python arguments as the body → {"text", "is_error", "result"}
//	GET    /healthz                   liveness, slot use and the health of Options.Health's components
//	GET    /livez, GET /readyz        probes: alive; ready, or draining (drain.go)
//	GET    /metrics                   Prometheus text format, from the Server's own registry
//
// Every run answers with the same JSON object:
//
//	{"value": 63, "stdout": "", "stderr": "", "tool_calls": 1,
//	 "error": null, "timing": {"total_ms": 1.2, "run_ms": 0.9}}
//
// plus "files", [{"name": "report/sum.csv", "data": "<base64>"}], the files
// the program created or changed in its working directory (absent when
// none), and "files_left_out", how many more the caps on files left out
// (absent when none). A request's "files", of the same shape, are placed in
// the working directory before the run (spine.Runner.CheckFiles says which
// names and sizes are allowed; the request body, base64 and all, is within
// MaxBody). When a run fails, "value" is null and "error" is
// {"kind", "type", "message", "line", "traceback"}; a refused request of
// any endpoint has the same shape, with "value" null. The status codes: 200
// ok (201 a session made, 204 one deleted), 400 bad request or bad snapshot,
// 401 no or wrong token, 403 a Host that is not loopback (without a token)
// or a browser's cross-origin request, 404 no such session (for this
// token), 408 time-out (of the run, of a request body that did not arrive,
// of a stream that stopped sending), 409 a snapshot of a session holding
// files open, 410 a session an earlier run lost, 413 too large, 415 wrong
// Content-Type (/v1/run and a session's run take application/json;
// /v1/run/stream any type but none and the three a browser sends
// cross-origin freely; a restore application/octet-stream), 422 Python
// error, 429 every slot busy, 499 client went away, 500 Guest failure, 502
// an MCP server the request named failed (mcpservers.go), 503
// Runner or Server closed, or too many sessions.
//
// # Output as it happens
//
// A run of any endpoint whose request says "Accept: text/event-stream" is
// answered, once admitted, as Server-Sent Events: 200, then "stdout" and
// "stderr" events while the program runs, each one's data a JSON string of
// the output (concatenate them), then one "result" event whose data is the
// Response above plus "status", the status the JSON answer would have had.
// A refusal before the run (a bad request, every slot busy) is the usual
// JSON answer. A client that goes away stops its run.
//
//	event: stdout
//	data: "first\n"
//
//	event: result
//	data: {"status": 200, "value": 7, "stdout": "first\n", ...}
//
// # Streams
//
// A stream holds its run slot while its program arrives, and a client can
// send that program as slowly as it likes. Two limits keep slow clients from
// taking the server: a stream that sends nothing for Options.StreamIdle is
// ended (408, kind stream_idle), and streams may hold at most
// Options.StreamSlots of the slots at once (by default half), so the rest
// always serve /v1/run. Streams take a share rather than waiting for their
// whole body before they are admitted because the point of a stream is prefix
// mode: its early reads start while the program is still arriving, which
// needs the run, and so its slot, from the first byte.
//
// # Exposure
//
// With Options.Token (or Options.Tokens) set, every request but the probes
// (GET /healthz, /livez, /readyz) must carry "Authorization: Bearer
// <token>" (door.RequireToken); a session is then its token's alone.
// Without one, the Server
// answers only requests whose Host header names the loopback interface
// (localhost, 127.0.0.0/8, [::1]): serve it on loopback only. Either way it
// refuses browsers' cross-origin requests and bodies of the types a web
// page can send without a preflight. The Server does not bound
// how long a client takes to send headers or a /v1/run body, nor how many
// connections it keeps: serve it with an http.Server that has
// ReadHeaderTimeout and IdleTimeout set, a deadline on request bodies and a
// listener that caps connections, as spine serve does.
package service

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"runtime"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/codemode"
	"github.com/spine-run/spine/door"
	"github.com/spine-run/spine/fleet"
	"github.com/spine-run/spine/sessionstore"
)

// Options are the Server's settings. The zero value, and a nil *Options, mean
// the defaults; a zero field means that field's default.
type Options struct {
	// Slots is how many runs the Server admits at once. A request that finds
	// every slot busy is refused at once with 429 (and Retry-After); there is
	// no queue. Default: the Runner's pool size, else runtime.GOMAXPROCS(0).
	Slots int

	// MaxTimeout bounds every run, including the time its program takes to
	// stream in. A request's timeout_ms larger than it is cut to it; a request
	// without one gets it. Default 30 s.
	MaxTimeout time.Duration

	// MaxBody caps a request body in bytes; past it the answer is 413.
	// Default 1 MiB.
	MaxBody int64

	// StreamSlots is how many of the Slots streams (POST /v1/run/stream) may
	// hold at once; a stream past it is refused with 429 while /v1/run still
	// finds the other slots. Default: half of Slots, at least 1 (with one
	// slot, streams and runs share it); at most Slots.
	StreamSlots int

	// StreamIdle is how long a stream may send nothing, before its first
	// byte or between two chunks, before its run is ended with 408 (error
	// kind stream_idle) and its slot freed. Default 10 s. It needs a
	// ResponseWriter that supports read deadlines, as net/http's do.
	StreamIdle time.Duration

	// Token, when set, must come with every request but the probes (GET
	// /healthz, /livez, /readyz) as "Authorization: Bearer <token>"; others
	// get 401 (door.RequireToken). Its name in the access log is "default".
	Token string

	// Tokens are more tokens, each accepted as Token is: one for each
	// client. A session belongs to the token that made it; to requests with
	// another token it does not exist (404).
	Tokens []string

	// Tenants are more tokens, each with a name for logs (door.TokenName) and
	// its share of the Runner's sessions (Tenant).
	Tenants []Tenant

	// SessionsPerToken, when positive, caps the sessions each token (each
	// client, see Tokens) may hold at once through the Server, so that one
	// client cannot take all of the Runner's SessionOptions.Max; past it a
	// create or restore gets 503 too_many_sessions. Default 0: with several
	// tokens (or one with limits of its own), an even share of
	// SessionOptions.Max, as the Runner's other limits are (door.Shares); with
	// one token, the Runner's.
	SessionsPerToken int

	// MaxSnapshot caps the body of POST /v1/sessions/restore, a snapshot,
	// in bytes (past it the answer is 413), and each snapshot written to or
	// loaded from SessionStore. The body streams into the new session's
	// Guest a page at a time (spine.Runner.RestoreFrom), holding a slot.
	// Default: the Runner's SessionOptions.MaxSnapshot, the largest
	// snapshot its sessions can make (fleet.Options.MaxSnapshot).
	MaxSnapshot int64

	// Health, when set, is called on every GET /healthz: it returns the
	// state of components the Server depends on (the MCP servers behind its
	// tools, say), by name: "" for a healthy one, else a short error text.
	// /healthz lists them under "components" ("ok" or the text) and its
	// status is "degraded" when one is unhealthy. It must be quick: report
	// what is known, not probe.
	Health func() map[string]string

	// Logger receives a line for each failed run the Server cannot blame on
	// the request (Guest failures) and, at debug level, one for every run.
	// Texts in the lines are cut to door.MaxLogText bytes (door.ClipLogs).
	// nil means no logging.
	Logger *slog.Logger

	// Tool, when set, is run_python as the Server offers it to agents
	// written in any language: GET /v1/tool answers its definition (name,
	// description, schemas) and POST /v1/tool/call runs a model's call and
	// answers the text the model reads (package codemode). It must be made
	// for the Server's Runner; its time limit is each call's.
	Tool *codemode.Tool

	// SessionStore, when set, keeps the sessions beyond this process
	// (store.go, docs/scaling.md): a session's id is the same on every
	// Server sharing the store, a request for an id this Server does not
	// hold loads it from the store, and Close writes every session the
	// store lacks. The store stays the caller's to close.
	SessionStore sessionstore.Store

	// SessionWrite is when a session is written to SessionStore: WriteRun
	// (the default), WriteAnswer or WriteHibernate.
	SessionWrite WritePolicy

	// ToolWait bounds how long a run with client tools (a request's
	// "tools", paused.go) waits for the caller's results, and a run for
	// its caller's approval of a call (approvals.go): past it the run is
	// stopped, and a late continuation answered 408 tool_wait with the
	// output so far. Default DefaultToolWait (5 minutes).
	ToolWait time.Duration

	// MaxPaused caps the runs with client tools at once, paused or
	// running; past it a request with "tools" gets 429 too_many_paused.
	// With the Runner's Options.Approve, every run of /v1/run,
	// /v1/run/stream and a session's run is one such (it may pause for an
	// approval).
	// Each holds a Guest (its memory) while paused, but no slot. With
	// several tokens each may hold an even share (at least 1). Default
	// DefaultMaxPaused.
	MaxPaused int

	// Replica names this Server in the ids of its runs with client tools,
	// so that a load balancer in front of several routes each run's
	// continuations to the Server holding it (runid.go, docs/scaling.md).
	// 1 to 63 letters, digits and '-' (ValidReplica); New panics on
	// another. Default: none, which serves one Server, or a load balancer
	// that keeps each client on one Server.
	Replica string
	// MCPAllow is the hosts that a run request's "mcp_servers" may be on
	// (mcpclient.AllowList: a name, *.name, an address, each with :PORT
	// for a port other than 443 or 80; mcpservers.go). Empty, the default:
	// mcp_servers are refused. New panics on an entry that
	// mcpclient.ParseAllowList refuses.
	MCPAllow []string
}

// DefaultMaxPaused is the default of Options.MaxPaused: as many as the
// sessions a Runner keeps live by default, each a Guest in memory.
const DefaultMaxPaused = 64

// DefaultMaxTimeout, DefaultMaxBody and DefaultStreamIdle are the defaults
// of Options.MaxTimeout, Options.MaxBody and Options.StreamIdle.
const (
	DefaultMaxTimeout       = 30 * time.Second
	DefaultMaxBody    int64 = 1 << 20
	DefaultStreamIdle       = 10 * time.Second
)

// Server is the HTTP API over one spine.Runner. It is an http.Handler.
type Server struct {
	runner   *spine.Runner
	opts     Options
	slots    chan struct{} // a token per admitted run
	streams  chan struct{} // a token per admitted stream, which holds a slot too
	tenants  *door.Tenants // the tokens, with their names and shares; none: no token needed
	fleet    *fleet.Fleet  // the sessions, by id (package fleet)
	drain    drainState    // drain.go
	mux      *http.ServeMux
	registry *prometheus.Registry
	metrics  *metrics
	desk     *pausedDesk  // the runs paused for their callers (pausedruns.go)
	sessions *sessionDesk // the session endpoints (sessions.go)

	// crossOrigin refuses the state-changing requests a browser sends from
	// another origin.
	crossOrigin *http.CrossOriginProtection
}

// New returns a Server running programs with runner, which stays the
// caller's: close it after the Server has stopped serving (and after
// Server.Close, which ends the sessions made through it). opts may be nil.
func New(runner *spine.Runner, opts *Options) *Server {
	o := Options{}
	if opts != nil {
		o = *opts
	}
	if o.Slots <= 0 {
		o.Slots = runner.Stats().PoolSize
		if o.Slots <= 0 {
			o.Slots = runtime.GOMAXPROCS(0)
		}
	}
	if o.MaxTimeout <= 0 {
		o.MaxTimeout = DefaultMaxTimeout
	}
	if o.MaxBody <= 0 {
		o.MaxBody = DefaultMaxBody
	}
	if o.StreamSlots <= 0 {
		o.StreamSlots = max(1, o.Slots/2)
	}
	o.StreamSlots = min(o.StreamSlots, o.Slots)
	if o.StreamIdle <= 0 {
		o.StreamIdle = DefaultStreamIdle
	}
	if o.ToolWait <= 0 {
		o.ToolWait = DefaultToolWait
	}
	if o.MaxPaused <= 0 {
		o.MaxPaused = DefaultMaxPaused
	}
	if o.SessionWrite == "" {
		o.SessionWrite = WriteRun
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	} else {
		o.Logger = slog.New(door.ClipLogs(o.Logger.Handler()))
	}
	s := &Server{
		runner:   runner,
		opts:     o,
		slots:    make(chan struct{}, o.Slots),
		streams:  make(chan struct{}, o.StreamSlots),
		mux:      http.NewServeMux(),
		registry: prometheus.NewRegistry(),

		crossOrigin: http.NewCrossOriginProtection(),
	}
	if o.Replica != "" {
		if err := ValidReplica(o.Replica); err != nil {
			panic("service: Options.Replica: " + err.Error())
		}
	}
	s.desk = newPausedDesk(s, &o)
	s.sessions = &sessionDesk{Server: s}
	s.drain.init()
	s.tenants = door.NewTenants(runner, tenantsOf(&o), o.SessionsPerToken)
	s.metrics = newMetrics(s)
	s.fleet = fleet.New(runner, &fleet.Options{
		Store:        o.SessionStore,
		Write:        o.SessionWrite,
		MaxSnapshot:  o.MaxSnapshot,
		StoreTimeout: o.MaxTimeout,
		ShareOf:      s.shareOf,
		Logger:       o.Logger,
		OnStore:      func(op string) { s.metrics.storeOps.WithLabelValues(op).Inc() },
		OnWait: func(waiting bool) {
			if waiting {
				s.metrics.sessionWaits.Inc()
			} else {
				s.metrics.sessionWaits.Dec()
			}
		},
	})
	s.opts.MaxSnapshot = s.fleet.Options().MaxSnapshot
	s.mux.Handle("POST /v1/run", s.accept(needJSON, "POST /v1/run", s.handleRun))
	s.mux.Handle("POST /v1/run/stream", s.accept(needProgram, "POST /v1/run/stream", s.handleStream))
	s.mux.Handle("POST /v1/sessions", s.accept(noneOrJSON, "POST /v1/sessions", s.sessions.handleNewSession))
	s.mux.Handle("POST /v1/sessions/restore", s.accept(needOctets, "POST /v1/sessions/restore", s.sessions.handleRestore))
	s.mux.Handle("POST /v1/sessions/{id}/run", s.accept(needJSON, "POST /v1/sessions/{id}/run", s.sessions.handleSessionRun))
	s.mux.Handle("POST /v1/runs/{run_id}/tool_results", s.accept(needJSON, "POST /v1/runs/{run_id}/tool_results", s.desk.handleToolResults))
	s.mux.Handle("POST /v1/runs/{run_id}/approvals", s.accept(needJSON, "POST /v1/runs/{run_id}/approvals", s.desk.handleApprovals))
	s.mux.HandleFunc("GET /v1/sessions/{id}/snapshot", s.sessions.handleSnapshot)
	s.mux.HandleFunc("DELETE /v1/sessions/{id}", s.sessions.handleDeleteSession)
	if o.Tool != nil {
		s.mux.HandleFunc("GET /v1/tool", s.handleTool)
		s.mux.Handle("POST /v1/tool", s.accept(needJSON, "POST /v1/tool", s.desk.handleToolDescribe))
		s.mux.Handle("POST /v1/tool/call", s.accept(needJSON, "POST /v1/tool/call", s.handleToolCall))
	}
	s.mux.HandleFunc("GET /healthz", s.handleHealth)
	s.mux.HandleFunc("GET /livez", door.ServeLive)
	s.mux.HandleFunc("GET /readyz", s.handleReadyz)
	s.mux.Handle("GET /metrics", promhttp.HandlerFor(s.registry, promhttp.HandlerOpts{}))
	return s
}

// ServeHTTP implements http.Handler. Before a request reaches its endpoint it
// checks, in order: without a token, that the Host header names the
// loopback interface (403: a page whose name was rebound to 127.0.0.1
// sends its own name); that a browser did not send it from another origin
// (403, http.CrossOriginProtection); the token (401); and then, for each
// POST endpoint, the media type of its body (415), so that a page cannot
// send a run, a snapshot or a new session as one of the types a browser
// sends cross-origin without asking the server first.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.tenants.Len() == 0 && !loopbackHost(r.Host) {
		closeConn(w)
		s.refuse(w, time.Now(), http.StatusForbidden, kindForbidden,
			fmt.Sprintf("Host %q is not a loopback name: a server without a token answers only requests for localhost, 127.0.0.1 or [::1]", r.Host))
		return
	}
	if err := s.crossOrigin.Check(r); err != nil {
		closeConn(w)
		s.refuse(w, time.Now(), http.StatusForbidden, kindForbidden, "a browser sent this request from another origin: "+err.Error())
		return
	}
	_, who, known := s.tenants.Identify(r)
	authed := s.tenants.Len() == 0 || known
	if !authed && !door.IsProbe(r.URL.Path) {
		w.Header().Set("WWW-Authenticate", door.WWWAuthenticate)
		closeConn(w) // a client without the token holds no connection
		s.refuse(w, time.Now(), http.StatusUnauthorized, kindUnauthorized, door.UnauthorizedMessage)
		return
	}
	if !authed {
		closeConn(w) // a probe: answered, but no keep-alive without the token
	} else if known {
		door.SetTokenName(r.Context(), who.Name)
	}
	r, done := s.enterRequest(w, r)
	if r == nil {
		return
	}
	defer done()
	s.mux.ServeHTTP(w, r)
	door.SetSession(r.Context(), r.PathValue("id")) // the mux set it on r
}

// authorized reports whether r may use the Server: it carries one of the
// tokens, or the Server has none. Every token is compared, in constant time.
func (s *Server) authorized(r *http.Request) bool {
	if s.tenants.Len() == 0 {
		return true
	}
	_, _, known := s.tenants.Identify(r)
	return known
}

// loopbackHost reports whether host, a request's Host header, names the
// loopback interface: localhost, an IP of 127.0.0.0/8 or ::1, with or
// without a port.
func loopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	} else if len(host) > 2 && host[0] == '[' && host[len(host)-1] == ']' {
		host = host[1 : len(host)-1]
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Zone() == "" && ip.Unmap().IsLoopback()
}

// Registry returns the Prometheus registry behind GET /metrics, so that an
// embedding program can add collectors of its own.
func (s *Server) Registry() *prometheus.Registry {
	return s.registry
}
