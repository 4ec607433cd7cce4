package mcpclient

import (
	"context"
	"fmt"
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
}

func (e *RefusedError) Error() string {
	name := e.Server
	if name != "" {
		name = " " + name
	}
	return fmt.Sprintf("mcp server%s: this program's calls are refused: an earlier call broke the server (%v)", name, e.Cause)
}

func (e *RefusedError) Unwrap() error { return e.Cause }

// StuckError is Err's answer while the server has a session but does not
// answer: a call has waited longer than a quarter of Options.CallTimeout,
// and nothing came from the server since it was made.
type StuckError struct {
	Server  string
	Waiting time.Duration // how long the oldest call has waited
}

func (e *StuckError) Error() string {
	name := e.Server
	if name != "" {
		name = " " + name
	}
	return fmt.Sprintf("mcp server%s is not answering: a call has waited %v", name, e.Waiting.Round(time.Millisecond))
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

// calling records a call's start on session, and returns what ends it.
func (s *Server) calling(session *mcp.ClientSession) (done func(answered bool)) {
	s.mu.Lock()
	s.calls++
	id := s.calls
	s.waiting[id] = time.Now()
	s.mu.Unlock()
	return func(answered bool) {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.waiting, id)
		if answered && s.session == session {
			s.heard = time.Now()
		}
	}
}

// stuck is the StuckError of a server with a session that does not answer,
// or nil. s.mu is held.
func (s *Server) stuck() error {
	var oldest time.Time
	for _, start := range s.waiting {
		if oldest.IsZero() || start.Before(oldest) {
			oldest = start
		}
	}
	if oldest.IsZero() || s.heard.After(oldest) {
		return nil
	}
	if waited := time.Since(oldest); waited > s.callTimeout/4 {
		return &StuckError{Server: s.namespace, Waiting: waited}
	}
	return nil
}
