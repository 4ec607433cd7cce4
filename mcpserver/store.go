package mcpserver

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/codemode"
	"github.com/spine-run/spine/sessionstore"
)

// Sessions in a store (Options.Store; docs/rationale.md "MCP sessions in
// the store"). The SDK's streamable HTTP handler binds an Mcp-Session-Id to
// a session in its own memory, which no other process can serve; so with a
// store the SDK's handler runs stateless, and HTTPHandler gives out the MCP
// session ids itself. An id names a line of generations in the store, as a
// session of spine serve's does, owned by the hash of the token that made
// it. The server holds a live spine.Session per id and owner as a cache of
// the newest generation: before each call it asks the store whether another
// replica wrote a newer one and loads it if so; after each call it writes
// the next generation create-only (Options.StoreWrite), so that a replica
// holding an older generation never overwrites a newer one: it gets a
// conflict, its call's effect is undone, and its next call loads the
// newer.

// sessionIDHeader is the header of the MCP session id over streamable HTTP.
const sessionIDHeader = "Mcp-Session-Id"

// stored is a client's place in the store.
type stored struct {
	id    string // its MCP session id
	owner string // the hash of its token (sessionstore.Owner)
	gen   uint64 // the stored generation its live session is; 0 for none
	dirty bool   // its live session ran since it was last written
	stale bool   // its live session is not a stored generation: load before the next call
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
// hash of their bearer token, "" for none.
func ownerOf(h http.Header) string {
	scheme, credentials, ok := strings.Cut(h.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return sessionstore.Owner(strings.TrimSpace(credentials))
}

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

// storedCall runs req in the session id names for owner: its newest
// generation, loaded from the store if another replica wrote it, then
// written back per Options.StoreWrite. fresh starts it afresh, as the
// generation after the newest.
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
	notice := ""
	if c.lost != "" && !fresh {
		notice = lostNotice(c.lost)
	}
	c.lost = ""
	if res, err := h.sync(ctx, c, fresh, notice); res != nil || err != nil {
		return res, err
	}
	out, runErr := c.session.Run(ctx, req)
	if gone(runErr) != "" {
		// The session could not run the program at all: run it in the
		// store's newest generation.
		c.stale = true
		if res, err := h.sync(ctx, c, false, notice); res != nil || err != nil {
			return res, err
		}
		out, runErr = c.session.Run(ctx, req)
	}
	var pyErr *spine.PythonError
	if runErr != nil && !errors.As(runErr, &pyErr) {
		if c.session.Err() != nil {
			c.stale = true // the store holds its state before this call
		}
		return h.answer(ctx, out, runErr, notice, nil)
	}
	c.dirty = true
	if h.opts.StoreWrite == sessionstore.WriteRun {
		if err := h.write(ctx, c); err != nil {
			c.stale = true // the answer says the call failed: undo it
			return storeFailed(err, notice), nil
		}
	}
	return h.answer(ctx, out, runErr, notice, nil)
}

// sync makes c's live session the store's newest generation of its id
// (the caller holds c's turn): loaded when c holds none, when another
// replica wrote a newer one, or when its own was left stale; a new one
// when the store holds none, or when fresh. A call that cannot have it
// gets its result, headed by notice, or its protocol error.
func (h *handler) sync(ctx context.Context, c *client, fresh bool, notice string) (*mcp.CallToolResult, error) {
	st := h.opts.Store
	if c.session != nil && !c.stale && !fresh {
		if h.opts.StoreWrite == sessionstore.WriteHibernate {
			return nil, nil // this replica's copy is the newest: sticky routing
		}
		newer, err := st.Newer(ctx, c.id, c.gen)
		if err != nil {
			return storeFailed(err, notice), nil
		}
		if !newer {
			return nil, nil
		}
	}
	if c.session != nil {
		c.session.Close(context.Background())
		c.session = nil
	} else if why := h.reserve(c); why != "" {
		return failed(fmt.Sprintf("busy, retry: %s; call %s again in a moment", why, ToolName), notice), nil
	}
	sess, gen, err := h.load(ctx, c, fresh)
	if err != nil {
		h.release(c)
		switch {
		case errors.Is(err, sessionstore.ErrTaken):
			return nil, errNoSession
		case spine.Classify(err) == spine.OutcomeClosed:
			return nil, err
		case ctx.Err() != nil:
			return nil, ctx.Err()
		}
		return storeFailed(err, notice), nil
	}
	c.session, c.gen, c.stale, c.dirty = sess, gen, false, fresh
	return nil, nil
}

// load returns c's newest stored generation, restored, or a new session
// with the generation it follows (sessionstore.Claim), when the store
// holds none of c's or when fresh.
func (h *handler) load(ctx context.Context, c *client, fresh bool) (*spine.Session, uint64, error) {
	st := h.opts.Store
	for range 3 {
		if fresh {
			meta, err := st.Head(ctx, c.id)
			switch {
			case errors.Is(err, sessionstore.ErrNotFound):
			case err != nil:
				return nil, 0, err
			case !meta.OwnedBy(c.owner):
				return nil, 0, sessionstore.ErrTaken
			}
			sess, err := h.runner.NewSession(ctx)
			return sess, meta.Generation, err
		}
		rd, meta, err := sessionstore.Load(ctx, st, c.id, c.owner, h.runner.ImageKey(), h.opts.MaxSnapshot)
		if err == nil {
			// The snapshot streams from the store into the Guest's pages.
			sess, err := h.runner.RestoreFrom(ctx, bufio.NewReaderSize(rd, sessionstore.ReadMemory))
			rd.Close()
			return sess, meta.Generation, err
		}
		if !errors.Is(err, sessionstore.ErrNotFound) {
			return nil, 0, err
		}
		gen, err := sessionstore.Claim(ctx, st, c.id, c.owner)
		if errors.Is(err, sessionstore.ErrConflict) {
			continue // written since it was looked for: load it
		}
		if err != nil {
			return nil, 0, err
		}
		sess, err := h.runner.NewSession(ctx)
		return sess, gen, err
	}
	return nil, 0, fmt.Errorf("%w: %s kept changing while it was loaded", sessionstore.ErrConflict, c.id)
}

// write writes c's live session as the generation after the one it holds
// (the caller holds c's turn).
func (h *handler) write(ctx context.Context, c *client) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.opts.Timeout)
	defer cancel()
	meta := sessionstore.Meta{Generation: c.gen + 1, Owner: c.owner, Image: h.runner.ImageKey()}
	write := func(w io.Writer) error {
		// The snapshot streams from the Guest's pages to the store.
		bw := bufio.NewWriterSize(w, snapshotBuffer)
		if _, err := c.session.SnapshotTo(ctx, bw); err != nil {
			return err
		}
		return bw.Flush()
	}
	var err error
	if limit := h.storeBytes(c.owner); limit > 0 {
		err = h.opts.Store.PutOwned(ctx, c.id, meta, h.opts.MaxSnapshot, limit, write)
	} else {
		err = h.opts.Store.Put(ctx, c.id, meta, h.opts.MaxSnapshot, write)
	}
	if err != nil {
		return err
	}
	c.gen, c.dirty = meta.Generation, false
	return nil
}

// storeBytes is Options.StoreBytesOf(owner): 0 for none.
func (h *handler) storeBytes(owner string) int64 {
	if h.opts.StoreBytesOf == nil || owner == "" {
		return 0
	}
	return h.opts.StoreBytesOf(owner)
}

// snapshotBuffer gathers a snapshot's small writes into a store's.
const snapshotBuffer = 64 << 10

// persist writes c's live session if the store lacks its state (the caller
// holds c's turn).
func (h *handler) persist(ctx context.Context, c *client) error {
	if c.session == nil || c.stale || !c.dirty || c.session.Err() != nil {
		return nil
	}
	return h.write(ctx, c)
}

// putAside writes c's session to the store and closes it, to make room
// (the caller holds c's turn): its next call loads it. lost is what its
// next call is told if the write fails.
func (h *handler) putAside(c *client, lost string) {
	if err := h.persist(context.Background(), c); err != nil {
		h.closeSession(c, lost+"; writing it to the session store failed: "+err.Error())
	} else {
		h.closeSession(c, "")
	}
	c.stale = false
	h.mu.Lock()
	h.forgetIdle(c)
	h.mu.Unlock()
}

// storeFailed is the result of a call whose session the store could not
// give or take.
func storeFailed(err error, notice string) *mcp.CallToolResult {
	var (
		image *sessionstore.ImageError
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
// holds one, and its line in the store. It returns errNoSession when the
// store holds no session of owner's under id.
func (h *handler) end(ctx context.Context, id, owner string) error {
	h.mu.Lock()
	c := h.clients[storeKey{id, owner}]
	if c != nil {
		c.calls++
	}
	h.mu.Unlock()
	if c != nil {
		select {
		case <-c.turn:
		case <-ctx.Done():
			h.leave(c)
			return ctx.Err()
		}
		h.closeSession(c, "")
		c.stale = false
		c.turn <- struct{}{}
		h.leave(c)
	}
	meta, err := h.opts.Store.Head(ctx, id)
	switch {
	case errors.Is(err, sessionstore.ErrNotFound):
		return errNoSession
	case err != nil:
		return err
	case meta.Deleted || !meta.OwnedBy(owner):
		return errNoSession
	}
	return h.opts.Store.Delete(ctx, id)
}

// Close ends the server's sessions: with a store, each one whose state the
// store lacks is written first (a drain: another replica, or this one
// restarted, serves them next). Calls after it fail. It returns the
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
	var errs []error
	for _, c := range clients {
		select {
		case <-c.turn:
		case <-ctx.Done():
			return errors.Join(append(errs, ctx.Err())...)
		}
		if h.opts.Store != nil {
			if err := h.persist(ctx, c); err != nil {
				errs = append(errs, fmt.Errorf("session %s: %w", c.id, err))
			}
		}
		h.closeSession(c, "")
		c.turn <- struct{}{}
	}
	return errors.Join(errs...)
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
