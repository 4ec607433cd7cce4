package mcpserver

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/fleet"
	"github.com/spine-run/spine/sessionstore"
)

// The sessions of MCP clients are package fleet's, with a store or
// without, as spine serve's are: this file translates MCP to the Fleet.
// An MCP session is a fleet session (fleet.Attach) under an id: with a
// store, the MCP session id the client sends (store.go), owned by the hash
// of its token; without one, an id the server gives each MCP session of
// its own (a connection over stdio or in memory, an Mcp-Session-Id of the
// SDK's streamable HTTP handler), whose fleet session is deleted when the
// MCP session ends. Options.MaxSessions and the clients' caps are the
// Fleet's places (fleet.Options.Places, PlacesOf); the notice of a lost
// state is what the Fleet's Session.Lost says, in words for the model.

// connection returns the fleet session id of ss, an MCP session of a
// server without a store, made on its first call; its fleet session is
// deleted when ss ends.
func (h *handler) connection(ss *mcp.ServerSession) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	id := h.conns[ss]
	if id == "" {
		id = rand.Text()
		h.conns[ss] = id
		go h.watch(ss, id)
	}
	return id
}

// watch deletes the fleet session id of ss once ss has ended.
// ServerSession.Wait returns when the connection is closed — by the client
// (stdio or an in-memory transport closed, an HTTP DELETE), by the server,
// or by the HTTP handler's SessionTimeout — and its calls in flight have
// returned.
func (h *handler) watch(ss *mcp.ServerSession, id string) {
	ss.Wait()
	h.mu.Lock()
	delete(h.conns, ss)
	h.mu.Unlock()
	h.fleet.Delete(context.Background(), id, "")
}

// sessionCall runs req in the fleet session id names for owner
// (fleet.Attach), one call of it at a time: with a store its newest
// generation, loaded if another replica wrote it, or a new one when the
// store holds none, then written back per Options.StoreWrite; without one
// the session this server keeps for the MCP session. who is the client
// the call comes from (Options.ClientOf). fresh starts it afresh.
func (h *handler) sessionCall(ctx context.Context, id, owner, who string, req spine.Request, fresh bool) (*mcp.CallToolResult, error) {
	e, err := h.fleet.Attach(id, owner, who)
	if err != nil {
		return nil, protocolError(err)
	}
	defer h.fleet.Release(e)
	if err := e.Lock(ctx); err != nil {
		return nil, ctx.Err()
	}
	defer e.Unlock()
	var (
		out    *spine.Output
		runErr error
	)
	if fresh {
		runErr = h.fleet.Fresh(ctx, e)
	}
	if runErr == nil {
		out, runErr = h.fleet.Run(ctx, e, req)
		if gone(runErr) != "" {
			// The session could not run the program at all: run it again,
			// in the store's newest generation, or without a store in a
			// new session (Lost says the state was lost).
			out, runErr = h.fleet.Run(ctx, e, req)
		}
	}
	notice := lostNotice(e.Lost())
	var full *fleet.FullError
	switch {
	case errors.As(runErr, &full):
		why := fmt.Sprintf("all %d Python sessions are in use", full.Limit)
		if full.Own {
			why = fmt.Sprintf("your %d Python sessions, the most one client may keep, are all running", full.Limit)
		}
		return failed(fmt.Sprintf("busy, retry: %s; call %s again in a moment", why, ToolName), notice), nil
	case isStoreError(runErr):
		if errors.Is(runErr, fleet.ErrNoSession) || errors.Is(runErr, fleet.ErrTaken) || errors.Is(runErr, fleet.ErrCut) ||
			spine.Classify(runErr) == spine.OutcomeClosed {
			return nil, protocolError(runErr)
		}
		if errors.As(runErr, new(*fleet.StoredSnapshotError)) {
			// The server's fault, not the call's (the Fleet logged it with
			// the session's id): a JSON-RPC error, not a tool's.
			return nil, runErr
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return storeFailed(runErr, notice), nil
	}
	var live *spine.Session // a session whose loss loses the state: without a store
	if h.opts.Store == nil {
		live = e.Spine()
	}
	return h.answer(ctx, out, runErr, notice, live)
}

// gone says why a session's Run error (or what fleet.Session.Lost says)
// means the session cannot run any program (the program did not start),
// or "" when it does not.
func gone(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, spine.ErrSnapshot), errors.Is(err, spine.ErrSnapshotMismatch):
		return "the session was put aside while unused and could not be brought back"
	case errors.Is(err, spine.ErrSessionClosed):
		return "the session was closed after going unused for too long"
	case errors.Is(err, spine.ErrSessionLost):
		return "an earlier program left the interpreter unusable (it would not stop at its time limit, or it crashed)"
	}
	return ""
}

// lostNotice is what a call's result says when the client's state was lost
// under it for the reason lost (fleet.Session.Lost); "" for none.
func lostNotice(lost error) string {
	if lost == nil {
		return ""
	}
	why := gone(lost)
	var evicted *fleet.EvictedError
	switch {
	case errors.As(lost, &evicted) && evicted.Own:
		why = fmt.Sprintf("the session was closed to make room for a newer one of the same client (this server keeps at most %d for it)", evicted.Limit)
	case errors.As(lost, &evicted):
		why = fmt.Sprintf("the session was closed to make room for other clients' (this server keeps at most %d)", evicted.Limit)
	case why == "":
		why = lost.Error()
	}
	if evicted != nil && evicted.Err != nil {
		why += "; writing it to the session store failed: " + evicted.Err.Error()
	}
	return "The Python state of your earlier calls was lost: " + why +
		". This program ran in a new, empty session: the variables, imports and functions your earlier programs defined are gone; define again what you need."
}

// perClient is the cap of the sessions of the client ClientOf named name
// ("" for unnamed): its SessionsOf, else MaxSessionsPerClient; 0 for none
// (fleet.Options.PlacesOf).
func (h *handler) perClient(name string) int {
	if h.opts.SessionsOf != nil && name != "" {
		if n := h.opts.SessionsOf(name); n > 0 {
			return n
		}
	}
	return h.opts.MaxSessionsPerClient
}

// isStoreError reports whether err is the Fleet's rather than the
// program's: the session could not be loaded, stored or kept.
func isStoreError(err error) bool {
	var (
		store    *fleet.StoreError
		conflict *fleet.ConflictError
		image    *fleet.ImageError
		state    *fleet.NotStoredError
	)
	return errors.As(err, &store) || errors.As(err, &conflict) || errors.As(err, &image) || errors.As(err, &state) ||
		errors.Is(err, fleet.ErrNoSession) || errors.Is(err, fleet.ErrTaken) || errors.Is(err, fleet.ErrCut) ||
		errors.Is(err, spine.ErrSnapshot) || errors.Is(err, spine.ErrSnapshotMismatch)
}

// errNoSession is an MCP session id another owner holds.
var errNoSession = errors.New("mcpserver: no such MCP session")

// protocolError is the JSON-RPC error of a call the Fleet refused before
// it ran: no such MCP session for the call's token, or the server closing.
func protocolError(err error) error {
	if errors.Is(err, fleet.ErrNoSession) || errors.Is(err, fleet.ErrTaken) || errors.Is(err, sessionstore.ErrBadID) {
		return errNoSession
	}
	return err
}

// Close ends the server's sessions: with a store, each one whose state
// the store lacks is written first, once its call in flight has ended (a
// drain: another replica, or this one restarted, serves them next);
// without one they are lost (a call still running in one stops), and
// Close says how many at WARN (Options.ServerLog). Calls after it fail.
// Call Cut first when calls may still be running. It returns the writes'
// errors; ctx bounds them (fleet.Fleet.Close).
func (s *Server) Close(ctx context.Context) error { return s.h.fleet.Close(ctx) }

// Cut stops every call in flight, and every later one: each is answered
// with a JSON-RPC error, and a call's effect on its session is undone, the
// session left as it was before it, under every write policy
// (fleet.Fleet.Cut). A drain calls it when its grace period ends, then
// Close.
func (s *Server) Cut() {
	s.h.fleet.Cut() // first: a call ended by the cut is the Fleet's cut
	s.h.doCut()
}

// Hibernated writes a session that the Runner hibernated to the store, if
// the store lacks its state (under every policy but WriteRun, whose
// sessions are written already): set the Runner's
// SessionOptions.OnHibernate to it (fleet.Fleet.Hibernated).
func (s *Server) Hibernated(sess *spine.Session, snapshot io.Reader) {
	s.h.fleet.Hibernated(sess, snapshot)
}
