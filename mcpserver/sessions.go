package mcpserver

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/codemode"
)

// A client is what the server keeps for one MCP session that called
// run_python: its spine.Session, made on its first call.
type client struct {
	turn chan struct{} // holds a token while no call of the client has it

	// Owned by whoever holds the turn.
	session *spine.Session // nil before the first call, and once closed
	lost    string         // why the client's last session was closed under it, for its next call
	ended   bool           // its MCP session ended

	// Guarded by the handler's mu.
	who   string // the client it is of (Options.ClientOf): its MCP session's own when unnamed
	name  string // ClientOf's name of it, "" when unnamed
	held  bool   // it holds a place among opts.MaxSessions
	used  uint64 // the handler's call count when it was last called
	calls int    // with a store: the calls that have it, which keep it in the handler's clients

	stored // with a store: its place there (owned by whoever holds the turn)
}

// newClient returns a client ClientOf named name, or of unnamed when name
// is "".
func newClient(name, unnamed string) *client {
	who := unnamed
	if name != "" {
		who = "client " + name
	}
	c := &client{turn: make(chan struct{}, 1), who: who, name: name}
	c.turn <- struct{}{}
	return c
}

// sessionCall runs req in the spine.Session of ss's client, one call of the
// client at a time; fresh closes the client's session first.
func (h *handler) sessionCall(ctx context.Context, ss *mcp.ServerSession, who string, req spine.Request, fresh bool) (*mcp.CallToolResult, error) {
	c := h.client(ss, who)
	select {
	case <-c.turn:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { c.turn <- struct{}{} }()
	if c.ended {
		return nil, errors.New("mcpserver: the MCP session has ended")
	}
	if fresh {
		h.closeSession(c, "")
		c.lost = ""
	}
	notice := ""
	if c.lost != "" {
		notice, c.lost = lostNotice(c.lost), ""
	}
	if c.session == nil {
		if res, err := h.openSession(ctx, c, notice); res != nil || err != nil {
			return res, err
		}
	}
	out, err := c.session.Run(ctx, req)
	if why := gone(err); why != "" {
		// The session could not run the program at all: run it in a new one.
		h.closeSession(c, "")
		notice = lostNotice(why)
		if res, err := h.openSession(ctx, c, notice); res != nil || err != nil {
			return res, err
		}
		out, err = c.session.Run(ctx, req)
	}
	return h.answer(ctx, out, err, notice, c.session)
}

// gone says why a session's Run error means the session cannot run any
// program (the program did not start), or "" when it does not.
func gone(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, spine.ErrSessionLost):
		return "an earlier program left the interpreter unusable (it would not stop at its time limit, or it crashed)"
	case errors.Is(err, spine.ErrSessionClosed):
		return "the session was closed after going unused for too long"
	case errors.Is(err, spine.ErrSnapshot), errors.Is(err, spine.ErrSnapshotMismatch):
		return "the session was put aside while unused and could not be brought back"
	}
	return ""
}

// lostNotice is what a call's result says when the client's state was lost
// for the reason why.
func lostNotice(why string) string {
	return "The Python state of your earlier calls was lost: " + why +
		". This program ran in a new, empty session: the variables, imports and functions your earlier programs defined are gone; define again what you need."
}

// client returns the client of ss, made on its first call (by who, when
// named); it is forgotten, and its session closed, when ss ends.
func (h *handler) client(ss *mcp.ServerSession, who string) *client {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls++
	c := h.clients[ss]
	if c == nil {
		c = newClient(who, fmt.Sprintf("session %p", ss))
		h.clients[ss] = c
		go h.watch(ss, c)
	}
	c.used = h.calls
	return c
}

// watch closes c's session once ss has ended. ServerSession.Wait returns
// when the connection is closed — by the client (stdio or an in-memory
// transport closed, an HTTP DELETE), by the server, or by the HTTP handler's
// SessionTimeout — and its calls in flight have returned.
func (h *handler) watch(ss *mcp.ServerSession, c *client) {
	ss.Wait()
	h.mu.Lock()
	delete(h.clients, ss)
	h.mu.Unlock()
	<-c.turn
	c.ended = true
	h.closeSession(c, "")
	c.turn <- struct{}{}
}

// openSession gives c (whose turn the caller holds) a new session. A call
// that cannot have one gets its result, headed by notice, or its protocol
// error.
func (h *handler) openSession(ctx context.Context, c *client, notice string) (*mcp.CallToolResult, error) {
	fail := func(text string) *mcp.CallToolResult {
		res, _ := toolResult(&codemode.Result{IsError: true, Error: text, Notice: notice})
		return res
	}
	if why := h.reserve(c); why != "" {
		return fail(fmt.Sprintf("busy, retry: %s; call %s again in a moment", why, ToolName)), nil
	}
	s, err := h.runner.NewSession(ctx)
	if err != nil {
		h.release(c)
		switch {
		case spine.Classify(err) == spine.OutcomeClosed:
			return nil, err
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case spine.Classify(err) == spine.OutcomeTooManySessions:
			return fail(fmt.Sprintf("busy, retry: %v; call %s again in a moment", err, ToolName)), nil
		}
		return fail("the sandbox failed: " + err.Error()), nil
	}
	c.session = s
	return nil, nil
}

// closeSession closes c's session, if it has one (the caller holds c's
// turn); lost, when set, is why, for c's next call.
func (h *handler) closeSession(c *client, lost string) {
	if c.session == nil {
		return
	}
	c.session.Close(context.Background())
	c.session = nil
	c.lost = lost
	h.release(c)
}

// reserve takes a place among opts.MaxSessions for c, and among its
// client's MaxSessionsPerClient. With none free, it closes the session of
// another MCP session that is not running and takes its place: one of c's
// own client past MaxSessionsPerClient, else one of the client holding the
// most sessions (so a client opening many closes its own), least recently
// used first. It returns why not when every candidate is running.
func (h *handler) reserve(c *client) string {
	for {
		h.mu.Lock()
		limit := h.perClient(c.name)
		own := limit > 0 && h.held[c.who] >= limit
		if !own && h.open < h.opts.MaxSessions {
			h.open++
			h.held[c.who]++
			c.held = true
			h.mu.Unlock()
			return ""
		}
		type idle struct {
			c          *client
			held, used uint64
		}
		var others []idle
		for _, o := range h.clients {
			if o.held && o != c && (!own || o.who == c.who) {
				others = append(others, idle{o, uint64(h.held[o.who]), o.used})
			}
		}
		h.mu.Unlock()
		slices.SortFunc(others, func(a, b idle) int {
			return cmp.Or(cmp.Compare(b.held, a.held), cmp.Compare(a.used, b.used))
		})
		freed := false
		for _, o := range others {
			if freed = h.evict(o.c, own); freed {
				break
			}
		}
		switch {
		case freed:
		case own:
			return fmt.Sprintf("your %d Python sessions, the most one client may keep, are all running", h.perClient(c.name))
		default:
			return fmt.Sprintf("all %d Python sessions are in use", h.opts.MaxSessions)
		}
	}
}

// evict closes o's session for another MCP session's (of o's own client
// when own), unless a call of o has it.
func (h *handler) evict(o *client, own bool) bool {
	select {
	case <-o.turn:
	default:
		return false
	}
	defer func() { o.turn <- struct{}{} }()
	if o.session == nil && o.stored.id == "" {
		return false
	}
	why := fmt.Sprintf("the session was closed to make room for other clients' (this server keeps at most %d)", h.opts.MaxSessions)
	if own {
		why = fmt.Sprintf("the session was closed to make room for a newer one of the same client (this server keeps at most %d for it)", h.perClient(o.name))
	}
	if h.opts.Store != nil {
		return h.putAside(o, why)
	}
	h.closeSession(o, why)
	return true
}

// perClient is the cap of the sessions of the client ClientOf named name
// ("" for unnamed): its SessionsOf, else MaxSessionsPerClient; 0 for none.
func (h *handler) perClient(name string) int {
	if h.opts.SessionsOf != nil && name != "" {
		if n := h.opts.SessionsOf(name); n > 0 {
			return n
		}
	}
	return h.opts.MaxSessionsPerClient
}

// release gives back c's place among opts.MaxSessions.
func (h *handler) release(c *client) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if c.held {
		c.held = false
		h.open--
		if h.held[c.who]--; h.held[c.who] <= 0 {
			delete(h.held, c.who)
		}
	}
}
