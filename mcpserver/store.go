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
// session ids itself (sessions.go translates the calls to the Fleet).

// sessionIDHeader is the header of the MCP session id over streamable HTTP.
const sessionIDHeader = "Mcp-Session-Id"

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
// holds one (a call in flight in it stops), and its line in the store. It
// returns errNoSession when neither holds a session of owner's under id.
func (h *handler) end(ctx context.Context, id, owner string) error {
	err := h.fleet.Delete(ctx, id, owner)
	if errors.Is(err, fleet.ErrNoSession) {
		return errNoSession
	}
	return err
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
