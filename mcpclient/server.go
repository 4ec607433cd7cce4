package mcpclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os/exec"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spine-run/spine"
	"golang.org/x/sync/semaphore"
)

// Reconnection: the first attempt waits minBackoff after a session is lost,
// each failure doubles the wait up to maxBackoff, and a session that stayed up
// for healthyAfter starts the next round from minBackoff again (a server that
// dies right after its handshake keeps backing off).
const (
	minBackoff   = 100 * time.Millisecond
	maxBackoff   = 30 * time.Second
	healthyAfter = time.Minute

	defaultConnectTimeout = 30 * time.Second
)

// ErrClosed is the cause of a call's error after Server.Close.
var ErrClosed = errors.New("closed")

// DownError is the error of a call to a tool of a Server that has no session:
// the last one ended (the process exited, the connection failed, the server
// sent what the client could not decode) and the next is not up yet.
type DownError struct {
	Server string // the namespace the server's tools are under
	Cause  error  // why the session ended, or why the last reconnection failed
}

func (e *DownError) Error() string {
	name := e.Server
	if name != "" {
		name = " " + name
	}
	return fmt.Sprintf("mcp server%s is down: %v; reconnecting", name, e.Cause)
}

func (e *DownError) Unwrap() error { return e.Cause }

// A Server is an MCP server whose tools stay callable while its sessions come
// and go. When a session ends, Server connects again in the background,
// waiting 100ms before the first attempt and twice as long after each failure,
// up to 30s (back to 100ms once a session has lasted a minute, or when a
// program's call ended it). Calls made before the first attempt ends wait for
// it (or for their ctx); once an attempt has failed, calls fail at once with a
// *DownError naming the server and the cause, until one succeeds. Err reports
// the same.
//
// A response the client cannot decode, or a transport that fails, ends the
// session in the SDK: the call waiting for it fails with a *DownError and the
// server is reconnected. The program (spine.RunOf) whose call that was is
// refused from then on: its later calls fail at once with a *RefusedError, so
// that one program cannot keep the server down for the others. A call that
// fails while its session stays up (an error result, a JSON-RPC error, a
// cancelled context) fails alone. A call that gets no answer within
// Options.CallTimeout fails, and the session is replaced (a stuck command is
// ended and started again); so does one whose caller gave up first (its run
// ended) once it has waited as long, or once calls of 8 runs are given up
// with nothing heard from the server since the first (a ping sent at each
// tells a server that answers). While a call waits long for an answer that
// does not come, Err reports a *StuckError, which /healthz shows.
//
// Reconnecting repeats the MCP handshake only: the tools are those listed by
// Dial, called by their MCP names on whatever session is current.
type Server struct {
	namespace string
	transport func() mcp.Transport
	client    *mcp.Client
	timeout   time.Duration
	logger    *slog.Logger
	tools     spine.Manifest
	late      *lateList // of a Server that started down; nil otherwise
	callerOf  func(context.Context) string

	ctx    context.Context // ends with Close: reconnections and their waits
	cancel context.CancelFunc
	loop   chan struct{} // closed when the reconnecting goroutine returns

	mu      sync.Mutex
	session *mcp.ClientSession // nil while down or closed
	down    error              // the *DownError while session is nil
	closed  bool
	closeMu sync.Mutex // held by Close, so that a second Close waits for the first

	callTimeout  time.Duration
	refused      refusal             // the programs that broke a session
	classes      map[string]*strikes // the callers' calls of tools that broke sessions
	probation    map[string]bool     // the callers' calls of tools made alone (suspect)
	gate         *semaphore.Weighted // a call holds 1, one on probation all
	endedSession *mcp.ClientSession  // the last session whose end calls were counted at (snapshot)
	blamed       bool                // the session ended in a call of a program, now refused
	reconnecting bool                // a session ended and no reconnection has failed since
	attempt      chan struct{}       // closed when the current reconnection attempt ends
	calls        uint64
	waiting      map[uint64]*pending // the calls waiting for an answer, and those abandoned
	heard        time.Time           // the last answer of the current session
	ping         context.CancelFunc  // ends the ping asking whether the session answers; nil: none
}

// Dial connects to the MCP server reached through the transports that
// newTransport returns, lists its tools as Tools does, and keeps the server
// connected as Server describes. newTransport is called once per connection
// and must return a fresh transport each time (an *mcp.CommandTransport needs
// a new *exec.Cmd: a command runs once). ctx bounds the first connection and
// the listing; reconnections have Options.ConnectTimeout each. With
// Options.StartDown, a server that cannot be reached or listed at first is
// no error: the Server starts down (see StartDown).
//
// Close the Server when its tools are no longer used: that ends the
// reconnecting and, for a command, the process.
func Dial(ctx context.Context, newTransport func() mcp.Transport, namespace string, opts *Options) (*Server, error) {
	if namespace != "" {
		if err := spine.ValidName(namespace); err != nil {
			return nil, fmt.Errorf("mcpclient: namespace: %w", err)
		}
	}
	if opts == nil {
		opts = &Options{}
	}
	s := &Server{
		namespace: namespace,
		transport: newTransport,
		client:    newClient(),
		timeout:   opts.ConnectTimeout,
		logger:    opts.Logger,
		callerOf:  opts.CallerOf,
		probation: make(map[string]bool),
		gate:      semaphore.NewWeighted(exclusive),
		loop:      make(chan struct{}),

		callTimeout: opts.CallTimeout,
		attempt:     make(chan struct{}),
		waiting:     make(map[uint64]*pending),
		heard:       time.Now(),
	}
	if s.callTimeout <= 0 {
		s.callTimeout = defaultCallTimeout
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if s.timeout <= 0 {
		s.timeout = defaultConnectTimeout
	}
	if s.logger == nil {
		s.logger = slog.New(slog.DiscardHandler)
	}
	watch := newTaskWatch()
	s.transport = func() mcp.Transport { return watch.watch(newTransport()) }
	session, err := s.client.Connect(ctx, s.transport(), nil)
	if err != nil {
		if opts.StartDown {
			if errors.Is(err, io.EOF) || errors.Is(err, mcp.ErrConnectionClosed) {
				err = errClosedByServer
			}
			return s.startDown(fmt.Errorf("connecting: %w", err), opts, watch)
		}
		s.cancel()
		return nil, fmt.Errorf("mcpclient: %s: connecting: %w", label(namespace), err)
	}
	tools, err := list(ctx, session, namespace)
	if err != nil && opts.StartDown {
		session.Close()
		return s.startDown(err, opts, watch)
	}
	if err == nil {
		s.tools, err = manifest(s.caller, namespace, tools, opts, watch)
	}
	if err != nil {
		session.Close()
		s.cancel()
		return nil, err
	}
	s.session = session
	go s.keep(session)
	return s, nil
}

// startDown returns s, whose server could not be reached or listed at first
// (cause), down and connecting in the background (Options.StartDown). Its
// tools are stand-ins for the tools of Options.Tools, which call the
// server's tools once it is connected and listed.
func (s *Server) startDown(cause error, opts *Options, watch *taskWatch) (*Server, error) {
	s.late = &lateList{opts: opts, watch: watch, calls: make(map[string]spine.Tool)}
	early := make(map[string]bool)
	for _, name := range opts.EarlyReads {
		early[name] = true
	}
	s.tools = spine.Manifest{}
	origin := make(map[string]string)
	for _, name := range opts.Tools {
		py := PythonName(name)
		if py == "" {
			s.cancel()
			return nil, fmt.Errorf("mcpclient: %s: tool %q has no usable Python name", label(s.namespace), name)
		}
		if s.namespace != "" {
			py = s.namespace + "." + py
		}
		if other, clash := origin[py]; clash {
			s.cancel()
			return nil, fmt.Errorf("mcpclient: %s: tools %q and %q would both be %s in Python", label(s.namespace), other, name, py)
		}
		origin[py] = name
		s.tools[py] = spine.ToolSpec{
			Call:           s.standIn(name, py),
			AllowEarlyRead: early[name],
			Description:    fmt.Sprintf("A tool of the MCP server %s, which was down when spine started: its description and parameters come from the server; pass keyword arguments.", s.namespace),
			InputSchema:    json.RawMessage(`{"type":"object","additionalProperties":true}`),
			KeywordOnly:    true,
		}
	}
	s.down = &DownError{Server: s.namespace, Cause: cause}
	s.logger.Warn("mcp server down at start; connecting in the background", "server", s.namespace, "cause", cause)
	go s.keep(nil)
	return s, nil
}

// lateList is what a Server that started down needs to list its tools once
// it connects: the Options and the task watch of Dial, and then the calls
// of its tools, by Python name.
type lateList struct {
	opts  *Options
	watch *taskWatch
	done  bool                  // listed
	err   error                 // of the manifest: the tool lists name tools the server lacks
	calls map[string]spine.Tool // the server's tools, once listed
}

// standIn is the Call of the stand-in for the MCP tool name (py in Python)
// of a Server that started down: the tool's call once the server is listed,
// else the error that says why not.
func (s *Server) standIn(name, py string) spine.Tool {
	return func(ctx context.Context, args json.RawMessage) (any, error) {
		s.mu.Lock()
		call, listed, err := s.late.calls[py], s.late.done, s.late.err
		s.mu.Unlock()
		switch {
		case call != nil:
			return call(ctx, args)
		case err != nil:
			return nil, err
		case listed:
			return nil, fmt.Errorf("mcp server %s has no tool %s that Spine can call", s.namespace, name)
		}
		if _, err := s.await(ctx); err != nil {
			return nil, err
		}
		return s.standIn(name, py)(ctx, args) // connected meanwhile
	}
}

// listLate lists the tools of a Server that started down, on its first
// session. A listing that fails fails the connection; a tool list that
// names tools the server does not have is an error of every stand-in's call
// (and of Err).
func (s *Server) listLate(session *mcp.ClientSession) error {
	s.mu.Lock()
	late := s.late
	s.mu.Unlock()
	if late == nil || late.done {
		return nil
	}
	ctx, cancel := context.WithTimeout(s.ctx, s.timeout)
	defer cancel()
	tools, err := list(ctx, session, s.namespace)
	if err != nil {
		return err
	}
	m, err := manifest(s.caller, s.namespace, tools, late.opts, late.watch)
	s.mu.Lock()
	defer s.mu.Unlock()
	late.done, late.err = true, err
	for py, spec := range m {
		late.calls[py] = spec.Call
	}
	if err != nil {
		s.logger.Error("mcp server connected, but its tools cannot be used", "server", s.namespace, "error", err)
	} else {
		s.logger.Info("mcp server connected after start; its tools listed", "server", s.namespace, "tools", len(m))
	}
	return nil
}

// StartedDown reports whether the server could not be reached when Dial
// returned (Options.StartDown), so that Tools are stand-ins for
// Options.Tools, and Listed whether it has connected since and listed its
// tools.
func (s *Server) StartedDown() (startedDown, listed bool) {
	if s.late == nil {
		return false, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return true, s.late.done
}

// Tools returns the server's tools as manifest entries under its namespace
// (a new map each time).
func (s *Server) Tools() spine.Manifest { return maps.Clone(s.tools) }

// Err is nil while the server has a session that answers. Otherwise it is
// the *DownError its calls fail with, a *StuckError while a call has waited
// long for an answer that does not come, or, after Close, an error wrapping
// ErrClosed.
func (s *Server) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.current(); err != nil {
		return err
	}
	if s.late != nil && s.late.err != nil {
		return s.late.err
	}
	return s.stuck()
}

// current is the session calls use, or the error they fail with. s.mu is held.
func (s *Server) current() (*mcp.ClientSession, error) {
	switch {
	case s.closed:
		return nil, fmt.Errorf("mcp %s: %w", label(s.namespace), ErrClosed)
	case s.session == nil:
		return nil, s.down
	}
	return s.session, nil
}

// Close stops reconnecting, closes the session (for a command: closes its
// input, waits for it to exit, and signals it if it does not) and returns when
// nothing of the Server runs any more. It is safe to call more than once and
// concurrently; later calls of the tools fail.
func (s *Server) Close() error {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	session := s.session
	s.session = nil
	s.mu.Unlock()
	s.cancel()
	var err error
	if session != nil {
		err = session.Close()
	}
	<-s.loop
	return err
}

// keep watches session and replaces it whenever it ends, until Close.
func (s *Server) keep(session *mcp.ClientSession) {
	defer close(s.loop)
	var wait backoff
	for {
		if session != nil { // nil: down at start
			up := time.Now()
			err := session.Wait()
			session.Close() // a no-op for an ended session; waits for a command to exit
			if s.ctx.Err() != nil {
				return
			}
			cause := sessionEnded(err)
			blamed := s.lost(session, cause)
			s.logger.Warn("mcp server down", "server", s.namespace, "cause", cause)
			if blamed || time.Since(up) >= healthyAfter {
				// A session a program's call broke says nothing of the server.
				wait.reset()
			}
			session = nil
		}
		for attempt := 1; session == nil; attempt++ {
			timer := time.NewTimer(wait.next())
			select {
			case <-timer.C:
			case <-s.ctx.Done():
				timer.Stop()
				return
			}
			ctx, cancel := context.WithTimeout(s.ctx, s.timeout)
			next, err := s.client.Connect(ctx, s.transport(), nil)
			cancel()
			if err == nil {
				if err = s.listLate(next); err != nil {
					next.Close()
				}
			}
			if err != nil {
				if s.ctx.Err() != nil {
					return
				}
				err = connectFailed(err)
				s.logger.Warn("mcp server still down", "server", s.namespace, "cause", err, "attempt", attempt)
				s.failed(err)
				continue
			}
			session = next
			if !s.up(next) {
				next.Close()
				return
			}
			s.logger.Info("mcp server reconnected", "server", s.namespace, "attempt", attempt)
		}
	}
}

// lost records that the last session ended, because of cause, and reports
// whether a program's call was to blame (broke). Calls wait for the first
// reconnection attempt.
func (s *Server) lost(session *mcp.ClientSession, cause error) (blamed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.snapshot(session)
	if s.session != nil || s.down == nil { // else a call saw the end first (broke), and said why
		s.down = &DownError{Server: s.namespace, Cause: cause}
	}
	s.session = nil
	s.reconnecting = true
	blamed, s.blamed = s.blamed, false
	return blamed
}

// failed records that a reconnection failed, because of cause: calls fail at
// once until one succeeds.
func (s *Server) failed(cause error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.session = nil
	s.down = &DownError{Server: s.namespace, Cause: cause}
	s.attempted(true)
}

// breaker is who a call that found its session broken may blame: run is
// the program whose call it was (0: none), refused from then on when
// refuse is set (its call was alone in flight), and class, when not "",
// the caller and tool whose call that was, which takes a strike.
type breaker struct {
	run    uint64
	refuse bool
	class  string
}

// broke records that session ended, as a call on it found out, and returns
// the error of that call. Its cause stays the server's (Err's), unless the
// reconnecting goroutine saw the end first and recorded its own.
//
// The program whose call it was, when there is one, does not make the
// reconnection back off; whom the call blames is refused as breaker says.
func (s *Server) broke(session *mcp.ClientSession, cause error, blame breaker) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if blame.run != 0 && blame.refuse {
		s.refused.add(blame.run, cause) // also when the reconnecting goroutine saw the end first
	}
	if blame.class != "" {
		s.strike(blame.class, cause)
	}
	if s.session == session {
		s.session = nil
		s.down = &DownError{Server: s.namespace, Cause: cause}
		s.reconnecting = true
		s.blamed = blame.run != 0
	}
	if _, err := s.current(); err != nil {
		return err
	}
	return &DownError{Server: s.namespace, Cause: cause}
}

// up makes session the current one; false after Close.
func (s *Server) up(session *mcp.ClientSession) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.session, s.down = session, nil
	s.heard = time.Now()
	for id, p := range s.waiting {
		if p.abandoned { // on an ended session
			delete(s.waiting, id)
		}
	}
	s.attempted(false)
	return true
}

// caller returns the spine.Tool that calls the MCP tool on the current
// session (await), within the call time limit. The program of a call that
// breaks the session alone is refused from then on (RefusedError); so are
// the calls of the tool by a caller (Options.CallerOf; without it, by
// anyone) once they broke sessions classStrikes times, each alone in
// flight. A call in flight with others when its session broke may not be to
// blame: it is retried once on the next session, when retry says the tool
// allows it, and the calls of its tool by its caller are made alone until
// one is answered (suspect), so that the next break is blamed on the right
// one.
func (s *Server) caller(name string, retry bool) spine.Tool {
	return func(ctx context.Context, args json.RawMessage) (any, error) {
		if len(args) == 0 {
			args = json.RawMessage("{}")
		}
		run := spine.RunOf(ctx)
		var caller string
		if s.callerOf != nil {
			caller = s.callerOf(ctx)
		}
		class := caller + "\x00" + name // whose calls of what
		if err := s.refusal(run, class); err != nil {
			return nil, err
		}
		for retried := false; ; retried = true {
			weight := int64(1)
			if s.suspect(class) {
				weight = exclusive
			}
			if err := s.gate.Acquire(ctx, weight); err != nil {
				return nil, err
			}
			result, err, again := s.callOnce(ctx, name, args, run, class)
			s.gate.Release(weight)
			if weight == exclusive && (err == nil || !again) {
				s.probe(class, false) // answered alone, or failed alone
			}
			if again {
				s.probe(class, true)
			}
			if !again || !retry || retried {
				if err != nil {
					return nil, err
				}
				return Value(result)
			}
		}
	}
}

// callOnce calls the MCP tool name once, on the current session. again
// says the call failed because its session broke while other calls were in
// flight: the call may not be to blame, and may be made again.
func (s *Server) callOnce(ctx context.Context, name string, args json.RawMessage, run uint64, class string) (result *mcp.CallToolResult, err error, again bool) {
	session, err := s.await(ctx)
	if err != nil {
		return nil, err, false
	}
	callCtx, cancel := context.WithTimeout(ctx, s.callTimeout)
	defer cancel()
	id, done := s.calling(session, run, class)
	result, err = session.CallTool(callCtx, &mcp.CallToolParams{Name: name, Arguments: args})
	var rpcErr *jsonrpc.Error
	if err == nil || errors.As(err, &rpcErr) || ctx.Err() != nil {
		done(err == nil || errors.As(err, &rpcErr), ctx.Err() != nil)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err), false
		}
		return result, nil, false
	}
	if callCtx.Err() != nil {
		done(false, false)
		// No answer in time: the server is stuck. Its session is ended,
		// and a new one (a new process) takes its place.
		cause := fmt.Errorf("a call of %s got no answer in %v", name, s.callTimeout)
		return nil, s.replace(session, cause), false
	}
	if !broken(ctx, session, err) {
		done(false, false)
		return nil, fmt.Errorf("%s: %w", name, err), false
	}
	alone := s.ended(session, id)
	done(false, false)
	blame := breaker{run: run}
	if alone {
		blame.refuse, blame.class = true, class
	}
	return nil, s.broke(session, callFailed(err), blame), !alone
}

// broken reports whether the call's error err came from its session ending
// rather than from this call alone. A session whose reading or writing failed
// refuses new calls at once, which a ping finds out; a JSON-RPC error is the
// server's answer, over a working session.
func broken(ctx context.Context, session *mcp.ClientSession, err error) bool {
	if errors.Is(err, mcp.ErrConnectionClosed) {
		return true
	}
	var rpcErr *jsonrpc.Error
	if errors.As(err, &rpcErr) {
		return false
	}
	return errors.Is(session.Ping(ctx, nil), mcp.ErrConnectionClosed)
}

// errClosedByServer is a session's end when the server closed its side.
var errClosedByServer = errors.New("the server closed the connection")

// callFailed is the cause of a session's end as the failed call saw it.
func callFailed(err error) error {
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, mcp.ErrConnectionClosed):
		return errClosedByServer
	case errors.Unwrap(err) != nil:
		err = errors.Unwrap(err) // without the SDK's `calling "tools/call":`
	}
	return notJSON(err)
}

// connectFailed is the cause of a failed reconnection.
func connectFailed(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, mcp.ErrConnectionClosed) {
		err = errClosedByServer
	}
	return fmt.Errorf("connecting again: %w", err)
}

// sessionEnded is the cause of a session's end from its Wait.
func sessionEnded(err error) error {
	var exit *exec.ExitError
	switch {
	case err == nil, errors.Is(err, io.EOF):
		return errClosedByServer
	case errors.As(err, &exit):
		return fmt.Errorf("the server process ended: %w", err)
	}
	return notJSON(err)
}

// notJSON says what a decoder's syntax error is about.
func notJSON(err error) error {
	var syntax *json.SyntaxError
	if errors.As(err, &syntax) {
		return fmt.Errorf("the server sent a message that is not valid JSON: %w", err)
	}
	return err
}

// backoff is the wait before each reconnection.
type backoff struct{ last time.Duration }

func (b *backoff) next() time.Duration {
	b.last = min(max(2*b.last, minBackoff), maxBackoff)
	return b.last
}

func (b *backoff) reset() { b.last = 0 }
