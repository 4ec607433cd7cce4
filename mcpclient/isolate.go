package mcpclient

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// What one program can do to a Server that others use (docs in Server):
// refusal of the programs that broke it, waiting for a reconnection in
// progress, and knowing a server that does not answer.

// maxRefused is how many programs a Server refuses at once, the most recent
// ones: a program's run ends, and the Server is not told.
const maxRefused = 1024

// defaultCallTimeout is Options.CallTimeout's default.
const defaultCallTimeout = time.Minute

// RefusedError is the error of a call made by a program (a run, spine.RunOf)
// after one of its earlier calls broke the Server's session: its answer could
// not be decoded, or the server's process ended during it. The program's
// later calls of that Server are refused, so that it cannot keep the server
// down for the programs that use it well.
type RefusedError struct {
	Server string // the namespace the server's tools are under
	Cause  error  // how the program's call broke the session
	// Tool, when not "", is the MCP tool whose calls are refused, by
	// anyone, or by Caller (Options.CallerOf) when not "": they broke the
	// server's sessions again and again. Until is when they are let
	// through again.
	Tool   string
	Caller string
	Until  time.Time
}

func (e *RefusedError) Error() string {
	name := e.Server
	if name != "" {
		name = " " + name
	}
	if e.Tool != "" {
		by := ""
		if e.Caller != "" {
			by = " by " + e.Caller
		}
		return fmt.Sprintf("mcp server%s: calls of %s%s are refused until %s UTC: they broke the server %d times (last: %v)",
			name, e.Tool, by, e.Until.UTC().Format(time.TimeOnly), classStrikes, e.Cause)
	}
	return fmt.Sprintf("mcp server%s: this program's calls are refused: an earlier call broke the server (%v)", name, e.Cause)
}

func (e *RefusedError) Unwrap() error { return e.Cause }

// StuckError is Err's answer while the server has a session but does not
// answer: a call has waited longer than a quarter of Options.CallTimeout,
// and nothing came from the server since it was made.
type StuckError struct {
	Server    string
	Waiting   time.Duration // how long the oldest call has waited
	Abandoned int           // of the calls waiting, those whose runs ended first
}

func (e *StuckError) Error() string {
	name := e.Server
	if name != "" {
		name = " " + name
	}
	text := fmt.Sprintf("mcp server%s is not answering: a call has waited %v", name, e.Waiting.Round(time.Millisecond))
	if e.Abandoned > 0 {
		text += fmt.Sprintf(" (calls abandoned by their runs: %d)", e.Abandoned)
	}
	return text
}

// refusal is the programs a Server refuses, the oldest first. s.mu is held.
type refusal struct {
	causes map[uint64]error
	order  []uint64
}

func (r *refusal) add(run uint64, cause error) {
	if r.causes == nil {
		r.causes = make(map[uint64]error)
	}
	if _, ok := r.causes[run]; ok {
		return
	}
	if len(r.order) >= maxRefused {
		delete(r.causes, r.order[0])
		r.order = r.order[1:]
	}
	r.causes[run] = cause
	r.order = append(r.order, run)
}

// await returns the session a call is to use. While the server is
// reconnecting after a session ended, and no attempt has failed since, the
// call waits for that attempt (or until ctx ends): a program that broke the
// session costs the others a reconnection, not their calls. Once an attempt
// has failed, the server is down and calls fail at once with the DownError.
func (s *Server) await(ctx context.Context) (*mcp.ClientSession, error) {
	for {
		s.mu.Lock()
		session, err := s.current()
		attempt, wait := s.attempt, session == nil && !s.closed && s.reconnecting
		s.mu.Unlock()
		if !wait {
			return session, err
		}
		select {
		case <-attempt:
		case <-ctx.Done():
			return nil, err
		case <-s.ctx.Done():
		}
	}
}

// attempted ends a reconnection attempt: the calls waiting for it look
// again. failed says it did not connect. s.mu is held.
func (s *Server) attempted(failed bool) {
	close(s.attempt)
	s.attempt = make(chan struct{})
	if failed {
		s.reconnecting = false
	}
}

// snapshot records, once per session, which calls were in flight when
// session ended: a call alone in flight broke it; with others, any of them
// may have. s.mu is held.
func (s *Server) snapshot(session *mcp.ClientSession) {
	if s.endedSession == session {
		return
	}
	s.endedSession = session
	var live []*pending
	for _, p := range s.waiting {
		if !p.abandoned && p.session == session {
			live = append(live, p)
		}
	}
	for _, p := range live {
		p.ended = true
		p.alone = len(live) == 1
	}
}

// ended reports, for the call id that found its session ended, whether it
// was alone in flight when the session ended.
func (s *Server) ended(session *mcp.ClientSession, id uint64) (alone bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.snapshot(session)
	p := s.waiting[id]
	return p != nil && p.ended && p.alone // else made once the session had ended: not its breaker
}

// exclusive is the weight of a call on probation in Server.gate: all of it,
// so that the call is alone in flight.
const exclusive = 1 << 30

// suspect reports whether the calls of class (a caller's of a tool) are on
// probation: they were in flight with others when a session broke, so that
// any of them may have broken it. Such a call is made alone (exclusive):
// if it breaks the session, it is to blame; if it is answered, the
// probation ends.
func (s *Server) suspect(class string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.probation[class]
}

// probe puts class on probation (on) or ends its probation.
func (s *Server) probe(class string, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case !on:
		delete(s.probation, class)
	case len(s.probation) < maxRefused:
		s.probation[class] = true
	}
}

// classStrikes is how many sessions the calls of one tool by one caller
// (Options.CallerOf; without it, by anyone) may break, each alone in
// flight, before those calls are refused for classRefusal.
const (
	classStrikes = 3
	classRefusal = 10 * time.Minute
)

// strikes is what a Server holds against one caller's calls of one tool.
type strikes struct {
	n       int
	until   time.Time // refused until then
	cause   error     // of the last break
	updated time.Time
}

// strike counts a break against class (a caller's calls of a tool), with
// cause; at classStrikes, those calls are refused. s.mu is held.
func (s *Server) strike(class string, cause error) {
	if s.classes == nil {
		s.classes = make(map[string]*strikes)
	}
	now := time.Now()
	c := s.classes[class]
	if c == nil {
		if len(s.classes) >= maxRefused { // forget the least recently struck
			var oldest string
			for name, o := range s.classes {
				if oldest == "" || o.updated.Before(s.classes[oldest].updated) {
					oldest = name
				}
			}
			delete(s.classes, oldest)
		}
		c = &strikes{}
		s.classes[class] = c
	}
	if !c.until.IsZero() && now.After(c.until) { // served its refusal: starts over
		*c = strikes{}
	}
	c.n++
	c.cause, c.updated = cause, now
	if c.n == classStrikes {
		c.until = now.Add(classRefusal)
		caller, tool, _ := strings.Cut(class, "\x00")
		s.logger.Warn("mcp server: calls of a tool refused: they broke the server", "server", s.namespace, "tool", tool, "caller", caller, "breaks", c.n, "for", classRefusal, "cause", cause)
	}
}

// refusal is the error of a call of run, by the caller class, that is
// refused, or nil.
func (s *Server) refusal(run uint64, class string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cause, refused := s.refused.causes[run]; refused {
		return &RefusedError{Server: s.namespace, Cause: cause}
	}
	if c := s.classes[class]; c != nil && time.Now().Before(c.until) {
		caller, tool, _ := strings.Cut(class, "\x00")
		return &RefusedError{Server: s.namespace, Tool: tool, Caller: caller, Until: c.until, Cause: c.cause}
	}
	return nil
}

// maxAbandoned is how many calls, of as many runs, may be abandoned by their
// runs (see abandon) with nothing heard from the server since the oldest
// began, before the session is replaced.
const maxAbandoned = 8

// pending is a call waiting for its answer, or one its run abandoned.
type pending struct {
	start     time.Time
	session   *mcp.ClientSession
	run       uint64 // spine.RunOf; 0 outside a run
	class     string // the caller (Options.CallerOf) and the tool: caller "\x00" tool
	abandoned bool   // the caller gave up: its run ended first

	// When its session ended with the call in flight (snapshot): whether it
	// was the only call in flight.
	ended, alone bool
}

// calling records the start of a call of run on session, and returns what
// ends it: answered says the session answered it (a result or a JSON-RPC
// error), abandoned that its caller's ctx ended first.
func (s *Server) calling(session *mcp.ClientSession, run uint64, class string) (id uint64, done func(answered, abandoned bool)) {
	s.mu.Lock()
	s.calls++
	id = s.calls
	s.waiting[id] = &pending{start: time.Now(), session: session, run: run, class: class}
	s.mu.Unlock()
	return id, func(answered, abandoned bool) {
		if abandoned && !answered {
			s.abandon(id)
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.waiting, id)
		if answered {
			s.heardFrom(session)
		}
	}
}

// heardFrom records an answer of session: the server is alive, and the
// calls abandoned on it before are forgotten. s.mu is held.
func (s *Server) heardFrom(session *mcp.ClientSession) {
	if s.session != session {
		return
	}
	s.heard = time.Now()
	for id, p := range s.waiting {
		if p.abandoned && (p.session != session || p.start.Before(s.heard)) {
			delete(s.waiting, id)
		}
	}
}

// abandon keeps the call id, whose caller gave up before its answer (its
// run's time was up), as waiting: a call's time limit cannot be reached
// inside a shorter run limit, and a server that answers nothing would
// otherwise never be replaced. The session is replaced once calls of
// maxAbandoned runs are abandoned with nothing heard from the server since
// the oldest began, or once one of them has waited Options.CallTimeout. A
// ping, sent at once, tells a server that answers (and cancelled the call
// as asked) from one that is stuck.
func (s *Server) abandon(id uint64) {
	s.mu.Lock()
	p := s.waiting[id]
	session := p.session
	if s.session != session || s.heard.After(p.start) {
		// Replaced, or the server answered since the call began.
		delete(s.waiting, id)
		s.mu.Unlock()
		return
	}
	p.abandoned = true
	var cause error
	runs := make(map[uint64]bool)
	callers := 0 // the runs, and each call made outside a run
	for _, q := range s.waiting {
		if !q.abandoned || q.session != session {
			continue
		}
		if q.run == 0 || !runs[q.run] {
			callers++
		}
		runs[q.run] = true
	}
	if callers >= maxAbandoned && s.session == session {
		cause = fmt.Errorf("calls of %d runs were abandoned, unanswered, and nothing came from the server since the first", callers)
	}
	var pingCtx context.Context
	if cause == nil && s.ping == nil && s.session == session {
		pingCtx, s.ping = context.WithTimeout(s.ctx, s.callTimeout)
	}
	ping := s.ping
	wait := s.callTimeout - time.Since(p.start)
	s.mu.Unlock()
	if cause != nil {
		s.replace(session, cause)
		return
	}
	time.AfterFunc(max(wait, 0), func() { s.expire(id, session) })
	if pingCtx != nil {
		go func() {
			err := session.Ping(pingCtx, nil)
			ping()
			s.mu.Lock()
			defer s.mu.Unlock()
			s.ping = nil
			if err == nil {
				s.heardFrom(session)
			}
		}()
	}
}

// expire replaces session if the abandoned call id is still unanswered (and
// nothing was heard from the server since it began) at its time limit.
func (s *Server) expire(id uint64, session *mcp.ClientSession) {
	s.mu.Lock()
	_, waiting := s.waiting[id]
	current := s.session == session
	s.mu.Unlock()
	if waiting && current {
		s.replace(session, fmt.Errorf("a call abandoned by its run got no answer in %v, nor anything else since", s.callTimeout))
	}
}

// replace ends session, which does not answer, because of cause: a new one
// (a new process) takes its place.
// It returns the error of the call that found it out.
func (s *Server) replace(session *mcp.ClientSession, cause error) error {
	err := s.broke(session, cause, breaker{})
	s.mu.Lock()
	if s.ping != nil {
		s.ping() // the session's Close waits for its calls
	}
	s.mu.Unlock()
	go session.Close() // keep reconnects once it has ended
	return err
}

// stuck is the StuckError of a server with a session that does not answer,
// or nil. s.mu is held.
func (s *Server) stuck() error {
	var oldest time.Time
	abandoned := 0
	for _, p := range s.waiting {
		if p.session != s.session {
			continue
		}
		if p.abandoned {
			abandoned++
		}
		if oldest.IsZero() || p.start.Before(oldest) {
			oldest = p.start
		}
	}
	if oldest.IsZero() || s.heard.After(oldest) {
		return nil
	}
	if waited := time.Since(oldest); waited > s.callTimeout/4 {
		return &StuckError{Server: s.namespace, Waiting: waited, Abandoned: abandoned}
	}
	return nil
}
