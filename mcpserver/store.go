package mcpserver

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/codemode"
	"github.com/spine-run/spine/door"
	"github.com/spine-run/spine/fleet"
	"github.com/spine-run/spine/sessionstore"
)

// Sessions in a store (Options.Store; docs/rationale.md "MCP sessions in
// the store") are served by package fleet, as spine serve's are: an MCP
// session id names a line of generations in the store, owned by the hash
// of the token that made it, and the server's live sessions are a cache of
// it. The SDK's streamable HTTP handler binds an Mcp-Session-Id to a
// session in its own memory, which no other process can serve; so with a
// store the SDK's handler runs stateless, and HTTPHandler gives out the MCP
// session ids itself. What is left here is the translation of MCP to the
// Fleet, and the server's places among MaxSessions.

// sessionIDHeader is the header of the MCP session id over streamable HTTP.
const sessionIDHeader = "Mcp-Session-Id"

// stored is a client's place in the store.
type stored struct {
	id    string // its MCP session id
	owner string // the hash of its token (sessionstore.Owner)
}

// storeKey is a client's key in the handler's clients with a store: the
// MCP sessions of two owners never share a client, whatever their ids.
type storeKey struct{ id, owner string }

// errNoSession is an MCP session id another owner holds.
var errNoSession = errors.New("mcpserver: no such MCP session")

// storedID returns the MCP session id a call came with over HTTP, with a
// store; "" for none.
func storedID(st sessionstore.Store, req *mcp.CallToolRequest) string {
	if st == nil || req.Extra == nil || req.Extra.Header == nil {
		return ""
	}
	id := req.Extra.Header.Get(sessionIDHeader)
	if sessionstore.CheckID(id) != nil {
		return ""
	}
	return id
}

// ownerOf is the owner of the sessions of requests with header h: the
// hash of their bearer token, "" for none (door.Owner, as spine serve's).
func ownerOf(h http.Header) string { return door.Owner(h) }

// storedClient returns the client of id for owner, made on its first call,
// counted among the calls that have it until leave.
func (h *handler) storedClient(id, owner, who string) (*client, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, spine.ErrClosed
	}
	h.calls++
	key := storeKey{id, owner}
	c := h.clients[key]
	if c == nil {
		c = newClient(who, "session "+id)
		c.stored = stored{id: id, owner: owner}
		h.clients[key] = c
	}
	c.calls++
	c.used = h.calls
	return c, nil
}

// leave ends a call's hold on c: a client without calls and without a
// session is forgotten (the store has its state).
func (h *handler) leave(c *client) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c.calls--
	h.forgetIdle(c)
}

// forgetIdle forgets c if nothing has it; h.mu is held.
func (h *handler) forgetIdle(c *client) {
	key := storeKey{c.id, c.owner}
	if c.calls == 0 && !c.held && h.clients[key] == c {
		delete(h.clients, key)
	}
}

// storedCall runs req in the session id names for owner (fleet.Attach):
// its newest generation, loaded from the store if another replica wrote
// it, or a new one when the store holds none; then written back per
// Options.StoreWrite. fresh starts it afresh, as the generation after the
// newest.
func (h *handler) storedCall(ctx context.Context, id, owner, who string, req spine.Request, fresh bool) (*mcp.CallToolResult, error) {
	c, err := h.storedClient(id, owner, who)
	if err != nil {
		return nil, err
	}
	defer h.leave(c)
	select {
	case <-c.turn:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { c.turn <- struct{}{} }()
	e, err := h.fleet.Attach(id, owner, who)
	if err != nil {
		return nil, protocolError(err)
	}
	defer h.fleet.Release(e)
	if err := e.Lock(ctx); err != nil {
		return nil, ctx.Err()
	}
	defer e.Unlock()
	notice := ""
	if c.lost != "" && !fresh {
		notice = lostNotice(c.lost)
	}
	c.lost = ""
	if !e.Live() {
		if why := h.reserve(c); why != "" {
			return failed(fmt.Sprintf("busy, retry: %s; call %s again in a moment", why, ToolName), notice), nil
		}
	}
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
			// The session could not run the program at all: run it in the
			// store's newest generation, which the Fleet loads.
			out, runErr = h.fleet.Run(ctx, e, req)
		}
	}
	if !e.Live() {
		h.release(c)
	}
	if isStoreError(runErr) {
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
	return h.answer(ctx, out, runErr, notice, nil)
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

// protocolError is the JSON-RPC error of a call the Fleet refused before
// it ran: no such MCP session for the call's token, or the server closing.
func protocolError(err error) error {
	if errors.Is(err, fleet.ErrNoSession) || errors.Is(err, fleet.ErrTaken) || errors.Is(err, sessionstore.ErrBadID) {
		return errNoSession
	}
	return err
}

// storeBytes is Options.StoreBytesOf(owner): 0 for none.
func (h *handler) storeBytes(owner string) int64 {
	if h.opts.StoreBytesOf == nil || owner == "" {
		return 0
	}
	return h.opts.StoreBytesOf(owner)
}

// putAside writes o's session to the store and closes it, to make room
// (the caller holds o's turn): its next call loads it. lost is what its
// next call is told if the write fails. It reports false when an
// operation of the Fleet's has the session now.
func (h *handler) putAside(o *client, lost string) bool {
	e, err := h.fleet.Get(o.id, o.owner)
	if err != nil {
		h.release(o)
		return true
	}
	defer h.fleet.Release(e)
	if !e.TryLock() {
		return false
	}
	defer e.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), h.opts.Timeout)
	defer cancel()
	if err := h.fleet.PutAside(ctx, e); err != nil {
		o.lost = lost + "; writing it to the session store failed: " + err.Error()
	}
	h.release(o)
	h.mu.Lock()
	h.forgetIdle(o)
	h.mu.Unlock()
	return true
}

// storeFailed is the result of a call whose session the store could not
// give or take.
func storeFailed(err error, notice string) *mcp.CallToolResult {
	var (
		image *fleet.ImageError
		full  *sessionstore.OwnerFullError
	)
	switch {
	case errors.As(err, &full):
		return failed("the sessions of this token are at their store_bytes, the bytes they may keep in the session store ("+err.Error()+"): this call's effect on the Python state is undone; free what this session holds, end another MCP session of this token, or call "+ToolName+" with fresh=true", notice)
	case errors.Is(err, sessionstore.ErrConflict):
		return failed("another replica ran this MCP session at the same time and stored its call first: this call's effect on the Python state is undone (its tool calls did happen); call "+ToolName+" again", notice)
	case errors.As(err, &image):
		return failed(err.Error(), notice)
	case errors.Is(err, sessionstore.ErrTooLarge), errors.Is(err, spine.ErrSnapshotTooLarge):
		return failed("the session's state is over the snapshot cap ("+err.Error()+"), so it cannot be stored: this call's effect on the Python state is undone; free what it holds, or call "+ToolName+" with fresh=true", notice)
	case errors.Is(err, spine.ErrSessionState), errors.Is(err, spine.ErrSnapshot), errors.Is(err, spine.ErrSnapshotMismatch):
		return failed("the session could not be stored or restored ("+err.Error()+"); call "+ToolName+" with fresh=true to start afresh", notice)
	}
	return failed("busy, retry: the session store failed ("+err.Error()+"); this call's effect on the Python state is undone; call "+ToolName+" again in a moment", notice)
}

// failed is a tool error result.
func failed(text, notice string) *mcp.CallToolResult {
	res, _ := toolResult(&codemode.Result{IsError: true, Error: text, Notice: notice})
	return res
}

// end ends the MCP session id of owner: its live session, if this server
// holds one (once its call in flight has ended), and its line in the
// store. It returns errNoSession when neither holds a session of owner's
// under id.
func (h *handler) end(ctx context.Context, id, owner string) error {
	h.mu.Lock()
	c := h.clients[storeKey{id, owner}]
	if c != nil {
		c.calls++
	}
	h.mu.Unlock()
	if c != nil {
		defer h.leave(c)
		select {
		case <-c.turn:
		case <-ctx.Done():
			return ctx.Err()
		}
		defer func() { c.turn <- struct{}{} }()
		h.release(c)
	}
	err := h.fleet.Delete(ctx, id, owner)
	if errors.Is(err, fleet.ErrNoSession) {
		return errNoSession
	}
	return err
}

// Close ends the server's sessions: with a store, each one whose state the
// store lacks is written first (a drain: another replica, or this one
// restarted, serves them next); without one they are lost, and Close says
// how many at WARN (Options.ServerLog). Calls after it fail. Call Cut first
// when calls may still be running: Close waits for them. It returns the
// writes' errors; ctx bounds them.
func (s *Server) Close(ctx context.Context) error {
	h := s.h
	h.mu.Lock()
	h.closed = true
	clients := make([]*client, 0, len(h.clients))
	for _, c := range h.clients {
		clients = append(clients, c)
	}
	h.mu.Unlock()
	lost := 0
	for _, c := range clients {
		if c.stored.id != "" {
			continue // the Fleet's
		}
		select {
		case <-c.turn:
		case <-ctx.Done():
			return ctx.Err()
		}
		if c.session != nil && c.session.Err() == nil {
			lost++
		}
		h.closeSession(c, "")
		c.turn <- struct{}{}
	}
	if lost > 0 {
		h.log.Warn("sessions lost at stop: there is no session store to keep them", "sessions", lost)
	}
	if h.fleet != nil {
		return h.fleet.Close(ctx)
	}
	return nil
}

// Cut stops every call in flight, and every later one: each is answered
// with a JSON-RPC error, and a call's effect on its session is undone, the
// session left as it was before it, under every write policy
// (fleet.Fleet.Cut). A drain calls it when its grace period ends, then
// Close.
func (s *Server) Cut() {
	if s.h.fleet != nil {
		s.h.fleet.Cut() // first: a call ended by the cut is the Fleet's cut
	}
	s.h.doCut()
}

// Hibernated writes a session that the Runner hibernated to the store, if
// the store lacks its state (under every policy but WriteRun, whose
// sessions are written already): set the Runner's
// SessionOptions.OnHibernate to it (fleet.Fleet.Hibernated).
func (s *Server) Hibernated(sess *spine.Session, snapshot io.Reader) {
	if s.h.fleet != nil {
		s.h.fleet.Hibernated(sess, snapshot)
	}
}

// HTTPHandler returns a streamable HTTP handler of the server; opts may be
// nil. Without Options.Store it is the SDK's, whose MCP sessions live in
// this process. With a store, the SDK's handler serves every request
// stateless and this one gives out the MCP session ids: an initialize
// request gets a new random id (Mcp-Session-Id), and the client's calls
// with it run in its session, which any replica on the store serves. A
// DELETE with an id ends the session, in the store too (204; 404 when the
// store holds no session of the request's token under it). GET has no
// event stream (405): the server sends the client nothing outside the
// answers to its requests.
func (s *Server) HTTPHandler(opts *mcp.StreamableHTTPOptions) http.Handler {
	var o mcp.StreamableHTTPOptions
	if opts != nil {
		o = *opts
	}
	get := func(*http.Request) *mcp.Server { return s.mcp }
	if s.h.opts.Store == nil {
		return mcp.NewStreamableHTTPHandler(get, &o)
	}
	o.Stateless = true
	return &storeHandler{h: s.h, next: mcp.NewStreamableHTTPHandler(get, &o), limit: cmp.Or(o.MaxRequestBodyBytes, mcp.DefaultMaxRequestBodyBytes)}
}

// storeHandler is HTTPHandler with a store.
type storeHandler struct {
	h     *handler
	next  http.Handler // the SDK's, stateless
	limit int64        // the most a request's body may hold; negative: no limit
}

func (sh *storeHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id := r.Header.Get(sessionIDHeader)
	if id != "" && sessionstore.CheckID(id) != nil {
		http.Error(w, "session not found", http.StatusNotFound)
		return
	}
	switch {
	case r.Method == http.MethodDelete && id != "":
		switch err := sh.h.end(r.Context(), id, ownerOf(r.Header)); {
		case err == nil:
			w.WriteHeader(http.StatusNoContent)
		case errors.Is(err, errNoSession):
			http.Error(w, "session not found", http.StatusNotFound)
		default:
			w.Header().Set("Retry-After", "1")
			http.Error(w, "the session store failed: "+err.Error(), http.StatusServiceUnavailable)
		}
		return
	case r.Method == http.MethodPost && id == "":
		if sh.limit > 0 {
			r.Body = http.MaxBytesReader(w, r.Body, sh.limit)
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			var tooLarge *http.MaxBytesError
			if errors.As(err, &tooLarge) {
				http.Error(w, fmt.Sprintf("request body exceeds %d bytes", tooLarge.Limit), http.StatusRequestEntityTooLarge)
				return
			}
			http.Error(w, "reading the request: "+err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		if initializes(body) {
			w.Header().Set(sessionIDHeader, rand.Text())
		}
	}
	sh.next.ServeHTTP(w, r)
}

// initializes reports whether body, a JSON-RPC message or batch, holds an
// initialize request.
func initializes(body []byte) bool {
	type message struct {
		Method string `json:"method"`
	}
	var batch []message
	if trimmed := bytes.TrimSpace(body); len(trimmed) > 0 && trimmed[0] == '[' {
		if json.Unmarshal(trimmed, &batch) != nil {
			return false
		}
	} else {
		var m message
		if json.Unmarshal(trimmed, &m) != nil {
			return false
		}
		batch = []message{m}
	}
	for _, m := range batch {
		if m.Method == "initialize" {
			return true
		}
	}
	return false
}
