// Package service is Spine's HTTP API: it runs Python programs sent over HTTP
// with a spine.Runner, admits only as many runs at once as it has slots, and
// exports Prometheus metrics.
//
//	POST   /v1/run                    {"source", "inputs", "timeout_ms", "early_reads", "files"} → run result
//	POST   /v1/run/stream             the program as the (chunked) request body: prefix mode
//	POST   /v1/sessions               → 201 {"id": "..."}: a session (sessions.go)
//	POST   /v1/sessions/{id}/run      as /v1/run, in the session
//	GET    /v1/sessions/{id}/snapshot → the session's snapshot, application/octet-stream
//	POST   /v1/sessions/restore       a snapshot as the body → 201 {"id": "..."}
//	DELETE /v1/sessions/{id}          → 204
//	GET    /v1/tool                   run_python's definition for a model (with Options.Tool; tool.go)
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
// error, 429 every slot busy, 499 client went away, 500 Guest failure, 503
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
// (GET /healthz, /livez, /readyz) must carry "Authorization: Bearer <token>" (RequireToken); a session is
// then its token's alone. Without one, the Server
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
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/codemode"
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
	// /healthz, /livez, /readyz) as
	// "Authorization: Bearer <token>"; others get 401 (RequireToken).
	Token string

	// Tokens are more tokens, each accepted as Token is: one for each
	// client. A session belongs to the token that made it; to requests with
	// another token it does not exist (404).
	Tokens []string

	// SessionsPerToken, when positive, caps the sessions each token (each
	// client, see Tokens) may hold at once through the Server, so that one
	// client cannot take all of the Runner's SessionOptions.Max; past it a
	// create or restore gets 503 too_many_sessions. Default 0: no cap of its
	// own.
	SessionsPerToken int

	// MaxSnapshot caps the body of POST /v1/sessions/restore, a snapshot,
	// in bytes; past it the answer is 413. The body is read into memory,
	// holding a slot. Default DefaultMaxSnapshot, which holds every snapshot
	// of a session within the default session memory limit (256 MiB); for
	// a limit of M bytes, M + M/512 + 1 MiB is enough.
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
	// Texts in the lines are cut to MaxLogText bytes (ClipLogs).
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
}

// DefaultMaxTimeout, DefaultMaxBody, DefaultStreamIdle and DefaultMaxSnapshot
// are the defaults of Options.MaxTimeout, Options.MaxBody, Options.StreamIdle
// and Options.MaxSnapshot.
const (
	DefaultMaxTimeout        = 30 * time.Second
	DefaultMaxBody     int64 = 1 << 20
	DefaultStreamIdle        = 10 * time.Second
	DefaultMaxSnapshot int64 = 257 << 20
)

// Server is the HTTP API over one spine.Runner. It is an http.Handler.
type Server struct {
	runner   *spine.Runner
	opts     Options
	slots    chan struct{}       // a token per admitted run
	streams  chan struct{}       // a token per admitted stream, which holds a slot too
	tokens   [][sha256.Size]byte // SHA-256 of each token; none: no token needed
	sessions sessionTable
	drain    drainState // drain.go
	mux      *http.ServeMux
	registry *prometheus.Registry
	metrics  *metrics

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
	if o.MaxSnapshot <= 0 {
		o.MaxSnapshot = DefaultMaxSnapshot
	}
	if o.SessionWrite == "" {
		o.SessionWrite = WriteRun
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	} else {
		o.Logger = slog.New(ClipLogs(o.Logger.Handler()))
	}
	s := &Server{
		runner:   runner,
		opts:     o,
		slots:    make(chan struct{}, o.Slots),
		streams:  make(chan struct{}, o.StreamSlots),
		mux:      http.NewServeMux(),
		registry: prometheus.NewRegistry(),
		sessions: sessionTable{byID: map[string]*session{}, perOwner: map[[sha256.Size]byte]int{}},

		crossOrigin: http.NewCrossOriginProtection(),
	}
	s.drain.init()
	for _, token := range append([]string{o.Token}, o.Tokens...) {
		if token != "" {
			s.tokens = append(s.tokens, sha256.Sum256([]byte(token)))
		}
	}
	s.metrics = newMetrics(s)
	s.mux.Handle("POST /v1/run", s.accept(needJSON, "POST /v1/run", s.handleRun))
	s.mux.Handle("POST /v1/run/stream", s.accept(needProgram, "POST /v1/run/stream", s.handleStream))
	s.mux.Handle("POST /v1/sessions", s.accept(noneOrJSON, "POST /v1/sessions", s.handleNewSession))
	s.mux.Handle("POST /v1/sessions/restore", s.accept(needOctets, "POST /v1/sessions/restore", s.handleRestore))
	s.mux.Handle("POST /v1/sessions/{id}/run", s.accept(needJSON, "POST /v1/sessions/{id}/run", s.handleSessionRun))
	s.mux.HandleFunc("GET /v1/sessions/{id}/snapshot", s.handleSnapshot)
	s.mux.HandleFunc("DELETE /v1/sessions/{id}", s.handleDeleteSession)
	if o.Tool != nil {
		s.mux.HandleFunc("GET /v1/tool", s.handleTool)
		s.mux.Handle("POST /v1/tool/call", s.accept(needJSON, "POST /v1/tool/call", s.handleToolCall))
	}
	s.mux.HandleFunc("GET /healthz", s.handleHealth)
	s.mux.HandleFunc("GET /livez", s.handleLivez)
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
	if len(s.tokens) == 0 && !loopbackHost(r.Host) {
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
	authed := s.authorized(r)
	if !authed && !probe(r.URL.Path) {
		w.Header().Set("WWW-Authenticate", wwwAuthenticate)
		closeConn(w) // a client without the token holds no connection
		s.refuse(w, time.Now(), http.StatusUnauthorized, kindUnauthorized, unauthorizedMessage)
		return
	}
	if !authed {
		closeConn(w) // a probe: answered, but no keep-alive without the token
	}
	r, done := s.admit(w, r)
	if r == nil {
		return
	}
	defer done()
	s.mux.ServeHTTP(w, r)
}

// authorized reports whether r may use the Server: it carries one of the
// tokens, or the Server has none. Every token is compared, in constant time.
func (s *Server) authorized(r *http.Request) bool {
	if len(s.tokens) == 0 {
		return true
	}
	got, ok := bearerDigest(r)
	match := 0
	for _, want := range s.tokens {
		match |= subtle.ConstantTimeCompare(got[:], want[:])
	}
	return ok && match == 1
}

// bodyRule is what an endpoint takes as its body's Content-Type.
type bodyRule int

const (
	// needJSON: application/json only (POST /v1/run and a session's run).
	needJSON bodyRule = iota
	// needProgram: any type but none (the body is the program whatever its
	// label) and the three a browser sends cross-origin without a
	// preflight: application/x-www-form-urlencoded, multipart/form-data and
	// text/plain (POST /v1/run/stream).
	needProgram
	// needOctets: application/octet-stream only (a snapshot to restore).
	needOctets
	// noneOrJSON: no Content-Type, or application/json (POST /v1/sessions,
	// which takes no body or {}): a form's types are refused, even empty.
	noneOrJSON
)

// problem says what is wrong with the Content-Type of r, sent to the
// endpoint named what, or returns "".
func (b bodyRule) problem(r *http.Request, what string) string {
	ct := r.Header.Get("Content-Type")
	mediaType, _, err := mime.ParseMediaType(ct)
	switch b {
	case needJSON:
		if err != nil || mediaType != "application/json" {
			return fmt.Sprintf(`%s needs "Content-Type: application/json", not %q`, what, ct)
		}
	case needProgram:
		if err != nil || corsSafelisted[mediaType] {
			return fmt.Sprintf(`%s needs a Content-Type other than %q: text/x-python, say (%s are refused: a browser sends them from any page)`,
				what, ct, "application/x-www-form-urlencoded, multipart/form-data and text/plain")
		}
	case needOctets:
		if err != nil || mediaType != "application/octet-stream" {
			return fmt.Sprintf(`%s needs "Content-Type: application/octet-stream", not %q`, what, ct)
		}
	case noneOrJSON:
		if ct != "" && (err != nil || mediaType != "application/json") {
			return fmt.Sprintf(`%s takes no Content-Type or "application/json", not %q`, what, ct)
		}
	}
	return ""
}

// accept returns h behind the media type check of rule for the endpoint
// named what: a request of another type is answered 415, unread.
func (s *Server) accept(rule bodyRule, what string, h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if msg := rule.problem(r, what); msg != "" {
			dropBody(w, r)
			s.refuse(w, time.Now(), http.StatusUnsupportedMediaType, kindUnsupportedMediaType, msg)
			return
		}
		h(w, r)
	})
}

// corsSafelisted are the media types a browser sends cross-origin without
// a CORS preflight.
var corsSafelisted = map[string]bool{
	"application/x-www-form-urlencoded": true,
	"multipart/form-data":               true,
	"text/plain":                        true,
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

// runRequest is the body of POST /v1/run.
type runRequest struct {
	Source     string          `json:"source"`
	Inputs     json.RawMessage `json:"inputs"`
	TimeoutMS  int64           `json:"timeout_ms"`
	EarlyReads bool            `json:"early_reads"`
	Files      []spine.File    `json:"files"` // data in base64
}

// Response is the body of every answer of /v1/run and /v1/run/stream.
type Response struct {
	Value           json.RawMessage  `json:"value"` // null when the run failed
	Stdout          string           `json:"stdout"`
	Stderr          string           `json:"stderr"`
	StdoutTruncated bool             `json:"stdout_truncated,omitempty"`
	StderrTruncated bool             `json:"stderr_truncated,omitempty"`
	ToolCalls       int              `json:"tool_calls"`
	Calls           []spine.ToolCall `json:"calls,omitempty"`          // each call the program made (Output.Calls)
	Files           []spine.File     `json:"files,omitempty"`          // what the program left in its working directory, data in base64
	FilesLeftOut    int              `json:"files_left_out,omitempty"` // files left out of Files by the caps on files
	Error           *Error           `json:"error"`                    // null on success
	Timing          Timing           `json:"timing"`
}

// Error says why a run failed or was refused.
type Error struct {
	// Kind is one of python, timeout, too_large, bad_request, overloaded,
	// canceled, guest, closed, internal, unauthorized, read_timeout (a
	// /v1/run body that did not arrive in time), stream_idle (a stream that
	// sent nothing for Options.StreamIdle), forbidden (a Host that is not
	// loopback on a server without a token, or a browser's cross-origin
	// request), unsupported_media_type (a body of the wrong Content-Type);
	// for sessions, not_found (no such session for this token: never made,
	// deleted or expired), session_gone (a run before left it broken: delete
	// it), bad_snapshot (a blob Restore refuses; a session holding files
	// open, which cannot be snapshotted) and too_many_sessions.
	Kind string `json:"kind"`
	// Type, Line and Traceback are set for a Python error: the exception's
	// class, the line of the program it points to (0 when unknown) and the
	// formatted traceback.
	Type      string `json:"type"`
	Message   string `json:"message"`
	Line      int    `json:"line"`
	Traceback string `json:"traceback"`
}

// Timing is where the time of a request went, in milliseconds.
type Timing struct {
	TotalMS float64 `json:"total_ms"` // from the handler's start to the answer
	RunMS   float64 `json:"run_ms"`   // inside Runner.Run (for a stream, reading it included)
}

// The error kinds, also the label values of spine_errors_total.
const (
	kindPython     = "python"
	kindTimeout    = "timeout"
	kindTooLarge   = "too_large"
	kindBadRequest = "bad_request"
	kindOverloaded = "overloaded"
	kindCanceled   = "canceled"
	kindGuest      = "guest"
	kindClosed     = "closed"
	kindInternal   = "internal"

	kindUnauthorized = "unauthorized"
	kindReadTimeout  = "read_timeout"
	kindStreamIdle   = "stream_idle"

	kindForbidden            = "forbidden"
	kindUnsupportedMediaType = "unsupported_media_type"

	kindNotFound        = "not_found"
	kindSessionGone     = string(spine.OutcomeSessionGone)
	kindBadSnapshot     = string(spine.OutcomeBadSnapshot)
	kindTooManySessions = string(spine.OutcomeTooManySessions)
)

// statusClientClosed is the answer (nobody reads it) when the client went
// away before its run ended: nginx's 499.
const statusClientClosed = 499

func (s *Server) handleRun(w http.ResponseWriter, r *http.Request) {
	s.runJSON(w, r, time.Now(), nil)
}

// runJSON answers a run whose request is r's JSON body (POST /v1/run, and
// POST /v1/sessions/{id}/run), run in session sess or, when sess is nil, in
// a Guest of the Runner's pool.
func (s *Server) runJSON(w http.ResponseWriter, r *http.Request, start time.Time, sess *session) {
	var req runRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, s.opts.MaxBody))
	dec.DisallowUnknownFields()
	err := dec.Decode(&req)
	if err == nil {
		// Read to the end: a second value is an error, and a body read to
		// its end lets net/http notice a client that goes away.
		if extra := dec.Decode(&struct{}{}); extra != io.EOF {
			err = extra
			if err == nil {
				err = errors.New("more than one JSON value in the body")
			}
		}
	}
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			s.refuse(w, start, http.StatusRequestEntityTooLarge, kindTooLarge, fmt.Sprintf("the request body is over the %d-byte limit", tooBig.Limit))
			return
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			s.refuse(w, start, http.StatusRequestTimeout, kindReadTimeout, "the request body did not arrive within the server's read timeout")
			return
		}
		s.refuse(w, start, http.StatusBadRequest, kindBadRequest, "bad JSON body: "+err.Error())
		return
	}
	if req.Source == "" {
		s.refuse(w, start, http.StatusBadRequest, kindBadRequest, `"source" is missing or empty`)
		return
	}
	inputs, err := s.runner.CheckInputs(req.Inputs)
	if err != nil {
		s.refuse(w, start, outcomeStatus[spine.Classify(err)], string(spine.Classify(err)), err.Error())
		return
	}
	if req.TimeoutMS < 0 {
		s.refuse(w, start, http.StatusBadRequest, kindBadRequest, `"timeout_ms" must not be negative`)
		return
	}
	if err := s.runner.CheckFiles(req.Files); err != nil {
		s.refuse(w, start, outcomeStatus[spine.Classify(err)], string(spine.Classify(err)), err.Error())
		return
	}
	s.run(w, r, start, spine.Request{
		Source:     req.Source,
		Inputs:     inputs,
		EarlyReads: req.EarlyReads,
		Timeout:    s.timeout(req.TimeoutMS),
		Files:      req.Files,
	}, nil, sess)
}

// timeout returns the run's time limit for a request's timeout_ms (0 = none).
func (s *Server) timeout(ms int64) time.Duration {
	if ms <= 0 || ms > s.opts.MaxTimeout.Milliseconds() {
		return s.opts.MaxTimeout
	}
	return time.Duration(ms) * time.Millisecond
}

// handleStream runs prefix mode: the request body is the program, read as it
// arrives. Its settings come from the query string or, when absent there,
// from headers: inputs (Spine-Inputs), timeout_ms (Spine-Timeout-Ms),
// early_reads (Spine-Early-Reads; accepted, but prefix mode always reads early).
func (s *Server) handleStream(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	// Until the stream is admitted: net/http would read the body of a
	// refused request to its end before answering, and a stream may never end.
	w.Header().Set("Connection", "close")
	query := r.URL.Query()
	param := func(name, header string) string {
		if query.Has(name) {
			return query.Get(name)
		}
		return r.Header.Get(header)
	}
	inputs, err := s.runner.CheckInputs(json.RawMessage(param("inputs", "Spine-Inputs")))
	if err != nil {
		s.refuse(w, start, outcomeStatus[spine.Classify(err)], string(spine.Classify(err)), err.Error())
		return
	}
	var timeoutMS int64
	if v := param("timeout_ms", "Spine-Timeout-Ms"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			s.refuse(w, start, http.StatusBadRequest, kindBadRequest, fmt.Sprintf("timeout_ms %q is not a non-negative integer", v))
			return
		}
		timeoutMS = n
	}
	if v := param("early_reads", "Spine-Early-Reads"); v != "" {
		if _, err := strconv.ParseBool(v); err != nil {
			s.refuse(w, start, http.StatusBadRequest, kindBadRequest, fmt.Sprintf("early_reads %q is not a boolean", v))
			return
		}
	}
	body := &streamBody{
		body:       http.MaxBytesReader(w, r.Body, s.opts.MaxBody),
		controller: http.NewResponseController(w),
		idle:       s.opts.StreamIdle,
	}
	s.run(w, r, start, spine.Request{
		Stream:     body,
		Inputs:     inputs,
		EarlyReads: true,
		Timeout:    s.timeout(timeoutMS),
	}, body, nil)
}

// run admits req if a slot is free, runs it and answers. body is the
// streamed program, nil for /v1/run. sess is the session to run it in, nil
// for a Guest of the pool: a session's run first waits, holding no slot,
// for the session's previous run or snapshot to end, for at most its own
// time limit.
func (s *Server) run(w http.ResponseWriter, r *http.Request, start time.Time, req spine.Request, body *streamBody, sess *session) {
	// The time limit is this context's, not Request.Timeout: its Err
	// tells a time-out from a client that went away, whichever came second.
	limit := req.Timeout
	req.Timeout = 0
	ctx, cancel := context.WithTimeout(r.Context(), limit)
	defer cancel()
	target := s.runner.Run
	if sess != nil {
		if err := s.waitTurn(ctx, sess); err != nil {
			s.sessionFailed(w, r, start, opRun, sess, err)
			return
		}
		target = s.sessionRun(sess)
	}
	// giveTurn gives the session's turn back, after the slot: the request
	// waiting for the turn then finds the slot free.
	giveTurn := func() {
		if sess != nil {
			sess.turn <- struct{}{}
		}
	}
	if body != nil {
		select {
		case s.streams <- struct{}{}:
		default:
			giveTurn()
			w.Header().Set("Retry-After", "1")
			s.refuse(w, start, http.StatusTooManyRequests, kindOverloaded, fmt.Sprintf("all %d stream slots are busy (streams may hold %d of the %d run slots); try again later", cap(s.streams), cap(s.streams), cap(s.slots)))
			return
		}
	}
	select {
	case s.slots <- struct{}{}:
	default:
		if body != nil {
			<-s.streams
		}
		giveTurn()
		w.Header().Set("Retry-After", "1")
		s.refuse(w, start, http.StatusTooManyRequests, kindOverloaded, fmt.Sprintf("all %d run slots are busy; try again later", cap(s.slots)))
		return
	}
	if body != nil {
		w.Header().Del("Connection") // the run reads the body
	}
	var events *eventStream
	var stdout, stderr *output
	if wantsEvents(r) {
		if body != nil {
			// The answer starts while the program still arrives.
			_ = http.NewResponseController(w).EnableFullDuplex()
		}
		events = startEvents(w)
		stdout, stderr = &output{events: events, name: "stdout"}, &output{events: events, name: "stderr"}
		req.Stdout, req.Stderr = stdout, stderr
	}
	var (
		out     *spine.Output
		status  int
		e       *Error
		runTime time.Duration
	)
	func() {
		// Free the slot, and then the session's turn, before answering (and
		// even if Run panicked): a client that has its answer can be sure
		// its next request finds the slot free.
		defer giveTurn()
		s.metrics.inFlight.Inc()
		defer func() {
			<-s.slots
			s.metrics.inFlight.Dec()
		}()
		if body != nil {
			s.metrics.streamsInFlight.Inc()
			defer func() {
				<-s.streams
				s.metrics.streamsInFlight.Dec()
			}()
		}
		if body != nil {
			defer body.finish() // even if Run panicked
		}
		runStart := time.Now()
		var err error
		out, err = target(ctx, req)
		runTime = time.Since(runStart)
		if body != nil {
			// A Read still pending in the Runner's reader returns, and how
			// reading ended is known before the run is judged.
			body.finish()
		}
		status, e = classify(ctx, limit, err, body)
		if sess != nil && e != nil {
			status, e = s.sessionRunError(r.Context(), sess, err, status, e)
		}
		status, e = s.cutAnswer(w, status, e)
	}()
	if e != nil && e.Kind == kindTooManySessions {
		w.Header().Set("Retry-After", "1")
	}

	outcome := "ok"
	if e != nil {
		outcome = e.Kind
		s.metrics.errors.WithLabelValues(e.Kind).Inc()
	}
	s.metrics.runs.WithLabelValues(outcome).Inc()
	s.metrics.duration.WithLabelValues(outcome).Observe(runTime.Seconds())
	resp := Response{Error: e, Timing: Timing{RunMS: ms(runTime)}}
	if out != nil {
		s.metrics.toolCalls.Add(float64(out.ToolCalls))
		resp.Stdout, resp.Stderr = out.Stdout, out.Stderr
		resp.StdoutTruncated, resp.StderrTruncated = out.StdoutTruncated, out.StderrTruncated
		resp.ToolCalls = out.ToolCalls
		resp.Calls = out.Calls
		resp.Files, resp.FilesLeftOut = out.Files, out.FilesLeftOut
		if e == nil {
			resp.Value = out.Value
		}
	}
	switch {
	case e == nil:
		s.opts.Logger.Debug("run", "status", status, "run_ms", resp.Timing.RunMS)
	case e.Kind == kindGuest || e.Kind == kindInternal:
		s.opts.Logger.Error("run failed", "status", status, "kind", e.Kind, "error", e.Message)
	default:
		s.opts.Logger.Debug("run", "status", status, "kind", e.Kind, "error", e.Message)
	}
	resp.Timing.TotalMS = ms(time.Since(start))
	if events != nil {
		stdout.flush()
		stderr.flush()
		if resp.Value == nil {
			resp.Value = json.RawMessage("null")
		}
		events.result(status, resp)
		return
	}
	writeJSON(w, status, resp)
}

// classify maps Run's error to a status and an Error (nil for success). ctx
// is the run's context, limit its time limit.
func classify(ctx context.Context, limit time.Duration, err error, body *streamBody) (int, *Error) {
	if err == nil {
		return http.StatusOK, nil
	}
	var pyErr *spine.PythonError
	if errors.As(err, &pyErr) {
		return http.StatusUnprocessableEntity, &Error{
			Kind: kindPython, Type: pyErr.Type, Message: pyErr.Message, Line: pyErr.Line, Traceback: pyErr.Traceback,
		}
	}
	// The Runner keeps only the text of a failed read: ask the body.
	var (
		readErr error
		idle    time.Duration
	)
	if body != nil {
		readErr = body.failure()
		if body.idled() {
			idle = body.idle
		}
	}
	var tooBig *http.MaxBytesError
	switch {
	case idle > 0: // before the context: the failed read canceled it
		return http.StatusRequestTimeout, &Error{Kind: kindStreamIdle, Message: fmt.Sprintf("the stream sent nothing for %v, the server's idle limit for streams; the run was stopped", idle)}
	case errors.As(readErr, &tooBig):
		return http.StatusRequestEntityTooLarge, &Error{Kind: kindTooLarge, Message: fmt.Sprintf("the streamed program is over the %d-byte limit", tooBig.Limit)}
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return http.StatusRequestTimeout, &Error{Kind: kindTimeout, Message: fmt.Sprintf("the run did not finish within its time limit of %v", limit)}
	case ctx.Err() != nil:
		return statusClientClosed, &Error{Kind: kindCanceled, Message: "the client went away; the run was stopped"}
	case readErr != nil:
		return statusClientClosed, &Error{Kind: kindCanceled, Message: "reading the program failed: " + readErr.Error()}
	}
	outcome := spine.Classify(err)
	e := &Error{Kind: string(outcome), Message: err.Error()}
	if outcome == spine.OutcomeClosed {
		e.Message = "the server is shutting down"
	}
	return outcomeStatus[outcome], e
}

// outcomeStatus is the HTTP status of each way a run can end.
var outcomeStatus = map[spine.Outcome]int{
	spine.OutcomeOK:         http.StatusOK,
	spine.OutcomePython:     http.StatusUnprocessableEntity,
	spine.OutcomeBadRequest: http.StatusBadRequest,
	spine.OutcomeTooLarge:   http.StatusRequestEntityTooLarge,
	spine.OutcomeTimeout:    http.StatusRequestTimeout,
	spine.OutcomeCanceled:   statusClientClosed,
	spine.OutcomeClosed:     http.StatusServiceUnavailable,
	spine.OutcomeGuest:      http.StatusInternalServerError,

	// A session closed (deleted, expired) is 404, as an unknown id, before
	// its outcome is looked up here: what is left is a lost session.
	spine.OutcomeSessionGone:     http.StatusGone,
	spine.OutcomeBadSnapshot:     http.StatusBadRequest,
	spine.OutcomeTooManySessions: http.StatusServiceUnavailable,
}

// refuse answers a request that never ran.
func (s *Server) refuse(w http.ResponseWriter, start time.Time, status int, kind, message string) {
	s.metrics.errors.WithLabelValues(kind).Inc()
	s.opts.Logger.Debug("refused", "status", status, "kind", kind, "error", message)
	writeJSON(w, status, Response{
		Value:  json.RawMessage("null"),
		Error:  &Error{Kind: kind, Message: message},
		Timing: Timing{TotalMS: ms(time.Since(start))},
	})
}

// HealthReport is the body of GET /healthz.
type HealthReport struct {
	// Status is "ok", or "degraded" when a component is unhealthy. Either
	// way the answer is 200: the server still runs programs (those that do
	// not need the failing component), and a load balancer that took every
	// replica out over a dependency they share would stop them all.
	Status      string `json:"status"`
	Slots       int    `json:"slots"`
	SlotsBusy   int    `json:"slots_busy"`
	StreamSlots int    `json:"stream_slots"`
	StreamsBusy int    `json:"streams_busy"`
	// Components are Options.Health's, by name: "ok", or the error text
	// (cut to MaxLogText bytes). With Options.Token set, a request without
	// the token sees "unhealthy" instead of the text, which may name
	// internal addresses.
	Components map[string]string `json:"components,omitempty"`
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	h := HealthReport{
		Status:      "ok",
		Slots:       cap(s.slots),
		SlotsBusy:   len(s.slots),
		StreamSlots: cap(s.streams),
		StreamsBusy: len(s.streams),
	}
	if s.opts.Health != nil {
		details := s.authorized(r)
		states := s.opts.Health()
		h.Components = make(map[string]string, len(states))
		for name, problem := range states {
			switch {
			case problem == "":
				h.Components[name] = "ok"
				continue
			case details:
				h.Components[name] = clip(problem)
			default:
				h.Components[name] = "unhealthy"
			}
			h.Status = "degraded"
		}
	}
	writeJSON(w, http.StatusOK, h)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)            // one line, ending in a newline
	enc.SetEscapeHTML(false)              // tracebacks show <agent>, not \u003cagent\u003e
	if err := enc.Encode(v); err != nil { // Output.Value is valid JSON: never
		status = http.StatusInternalServerError
		b.Reset()
		b.WriteString(`{"value":null,"error":{"kind":"internal","message":"encoding the answer failed"}}` + "\n")
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	w.Write(b.Bytes())
}

func ms(d time.Duration) float64 {
	return float64(d.Microseconds()) / 1000
}

// streamBody is the request body of /v1/run/stream as the Runner reads it. It
// remembers how reading failed (the Runner keeps only the text). Each Read
// may wait for the client at most idle: it sets the connection's read
// deadline first (net/http lifts it when the body ends, as it starts
// watching the connection for a client that goes away). Its Close — which
// the Runner calls to unblock a pending Read when the run's context ends —
// sets a read deadline in the past instead of closing the body: net/http's
// body Close waits for a pending Read, which would wait for the client.
type streamBody struct {
	body       io.ReadCloser
	controller *http.ResponseController
	idle       time.Duration

	mu       sync.Mutex
	reads    sync.WaitGroup // the Read in progress
	closed   bool           // Close or finish was called: no more Reads
	deadline bool           // read deadlines work (SetReadDeadline succeeded)
	err      error          // the first error other than io.EOF
	idleOut  bool           // err is the idle deadline's
	done     bool           // the body ended (io.EOF or an error)
	idleAt   time.Time      // the idle deadline of the last Read
	closedAt time.Time      // when close set a deadline in the past to end a Read
}

var errStreamClosed = errors.New("the stream was closed")

func (b *streamBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return 0, errStreamClosed
	}
	b.idleAt = time.Now().Add(b.idle)
	b.deadline = b.controller.SetReadDeadline(b.idleAt) == nil
	b.reads.Add(1)
	b.mu.Unlock()
	defer b.reads.Done()

	n, err := b.body.Read(p)
	if err != nil {
		b.mu.Lock()
		if !b.done && err != io.EOF {
			b.err = err
			// The idle deadline's, unless close cut the Read short first:
			// when the idle deadline fires, net/http cancels the request and
			// the run closes the stream, which may happen before this.
			b.idleOut = errors.Is(err, os.ErrDeadlineExceeded) && (!b.closed || !b.closedAt.Before(b.idleAt))
		}
		b.done = true
		b.mu.Unlock()
	}
	return n, err
}

// Close unblocks a pending Read.
func (b *streamBody) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.close()
	return nil
}

// close sets closed and a read deadline that has passed, unless the body has
// ended. b.mu is held.
func (b *streamBody) close() {
	if !b.closed && !b.done {
		b.closedAt = time.Now()
		b.controller.SetReadDeadline(b.closedAt)
	}
	b.closed = true
}

// finish unblocks a Read still pending after the run ended and waits for it
// to return, so that failure and idled tell how reading ended.
func (b *streamBody) finish() {
	b.mu.Lock()
	b.close()
	wait := b.deadline // else nothing unblocks the Read: do not wait for it
	b.mu.Unlock()
	if wait {
		b.reads.Wait()
	}
}

// failure returns how reading the body failed, or nil.
func (b *streamBody) failure() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

// idled reports whether the stream ended because it sent nothing for idle.
func (b *streamBody) idled() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.idleOut
}

// metrics are the Server's Prometheus metrics.
type metrics struct {
	runs      *prometheus.CounterVec
	duration  *prometheus.HistogramVec
	toolCalls prometheus.Counter
	errors    *prometheus.CounterVec
	inFlight  prometheus.Gauge

	streamsInFlight prometheus.Gauge

	sessionOps   *prometheus.CounterVec
	sessionWaits prometheus.Gauge
}

// Outcomes of an admitted run (labels of spine_runs_total and
// spine_run_duration_seconds), and every error kind (spine_errors_total).
var (
	runOutcomes = []string{"ok", kindPython, kindTimeout, kindTooLarge, kindBadRequest, kindCanceled, kindGuest, kindClosed, kindInternal, kindStreamIdle,
		kindNotFound, kindSessionGone, kindTooManySessions}
	errorKinds = []string{kindPython, kindTimeout, kindTooLarge, kindGuest, kindBadRequest, kindOverloaded, kindCanceled, kindClosed, kindInternal,
		kindUnauthorized, kindReadTimeout, kindStreamIdle, kindForbidden, kindUnsupportedMediaType,
		kindNotFound, kindSessionGone, kindBadSnapshot, kindTooManySessions}
	sessionOperations = []string{opCreate, opRestore, opSnapshot, opDelete}
)

func newMetrics(s *Server) *metrics {
	m := &metrics{
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spine_runs_total",
			Help: "Runs admitted and finished, by outcome (ok or an error kind).",
		}, []string{"outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "spine_run_duration_seconds",
			Help:    "Time spent in Runner.Run per admitted run (a streamed program's reading included), by outcome.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"outcome"}),
		toolCalls: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "spine_tool_calls_total",
			Help: "Tool calls made by programs.",
		}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spine_errors_total",
			Help: "Requests that failed or were refused, by kind: python, timeout, too_large, guest, bad_request, overloaded, canceled, closed, internal, unauthorized, read_timeout, stream_idle, forbidden, unsupported_media_type, not_found, session_gone, bad_snapshot, too_many_sessions.",
		}, []string{"kind"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "spine_runs_in_flight",
			Help: "Runs, and session operations (create, restore, snapshot), holding a slot now.",
		}),
		streamsInFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "spine_streams_in_flight",
			Help: "Streams (POST /v1/run/stream) holding a slot now, counted in spine_runs_in_flight too.",
		}),
		sessionOps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spine_session_operations_total",
			Help: "Session requests other than runs (counted in spine_runs_total), by operation (create, restore, snapshot, delete) and outcome (ok or an error kind).",
		}, []string{"operation", "outcome"}),
		sessionWaits: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "spine_session_requests_waiting",
			Help: "Requests waiting, without a slot, for their session's previous run or snapshot to end.",
		}),
	}
	for _, op := range sessionOperations {
		m.sessionOps.WithLabelValues(op, "ok")
	}
	for _, o := range runOutcomes {
		m.runs.WithLabelValues(o)
	}
	for _, k := range errorKinds {
		m.errors.WithLabelValues(k)
	}
	slots := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "spine_slots",
		Help: "Runs the server admits at once; past it requests get 429.",
	}, func() float64 { return float64(cap(s.slots)) })
	streamSlots := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "spine_stream_slots",
		Help: "How many of the slots streams may hold at once; past it streams get 429.",
	}, func() float64 { return float64(cap(s.streams)) })
	held := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "spine_server_sessions",
		Help: "Sessions made through this server and not yet deleted, expired or found closed.",
	}, func() float64 { return float64(s.sessions.size()) })
	s.registry.MustRegister(m.runs, m.duration, m.toolCalls, m.errors, m.inFlight, m.streamsInFlight, slots, streamSlots,
		m.sessionOps, m.sessionWaits, held,
		runnerCollector{s.runner},
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// runnerCollector exports the Runner's Stats, read once per scrape.
type runnerCollector struct{ runner *spine.Runner }

var (
	descPoolReady     = prometheus.NewDesc("spine_pool_ready", "Guest instances started and waiting in the pool.", nil, nil)
	descPoolSize      = prometheus.NewDesc("spine_pool_size", "The pool's target size (0 without a pool).", nil, nil)
	descInstancesMade = prometheus.NewDesc("spine_instances_made_total", "Guest instances instantiated by the Runner.", nil, nil)
	descRunsStarted   = prometheus.NewDesc("spine_runner_runs_started_total", "Runs started by the Runner, whoever asked.", nil, nil)
	descSessions      = prometheus.NewDesc("spine_sessions", "Sessions the Runner holds, live and hibernated, whoever made them.", nil, nil)
	descSessionsLive  = prometheus.NewDesc("spine_sessions_live", "Of those, sessions with a live Guest (the rest are hibernated).", nil, nil)
)

func (c runnerCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descPoolReady
	ch <- descPoolSize
	ch <- descInstancesMade
	ch <- descRunsStarted
	ch <- descSessions
	ch <- descSessionsLive
}

func (c runnerCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.runner.Stats()
	ch <- prometheus.MustNewConstMetric(descPoolReady, prometheus.GaugeValue, float64(st.PoolReady))
	ch <- prometheus.MustNewConstMetric(descPoolSize, prometheus.GaugeValue, float64(st.PoolSize))
	ch <- prometheus.MustNewConstMetric(descInstancesMade, prometheus.CounterValue, float64(st.InstancesMade))
	ch <- prometheus.MustNewConstMetric(descRunsStarted, prometheus.CounterValue, float64(st.Runs))
	ss := c.runner.SessionStats()
	ch <- prometheus.MustNewConstMetric(descSessions, prometheus.GaugeValue, float64(ss.Sessions))
	ch <- prometheus.MustNewConstMetric(descSessionsLive, prometheus.GaugeValue, float64(ss.Live))
}
