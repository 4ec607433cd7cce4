package service

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/sessionstore"
)

// The session endpoints (docs/http.md; docs/sessions.md):
//
//	POST   /v1/sessions                no body, or {}                    → 201 {"id": "..."}
//	POST   /v1/sessions/{id}/run       as POST /v1/run                   → as POST /v1/run
//	GET    /v1/sessions/{id}/snapshot                                    → 200 the snapshot (application/octet-stream)
//	POST   /v1/sessions/restore        a snapshot (application/octet-stream) → 201 {"id": "..."}
//	DELETE /v1/sessions/{id}                                             → 204
//
// A session's id is 128 random bits. With tokens, a session belongs to the
// token that made it: to a request with another token it does not exist
// (404, as for an id never made: not 403, which would say that it does).
// Creating, restoring, snapshotting and running all hold a slot; a request
// for a session whose previous run or snapshot is still going waits for it,
// without a slot, for at most its own time limit.

// SessionInfo is the body of the answer to POST /v1/sessions and POST
// /v1/sessions/restore.
type SessionInfo struct {
	ID string `json:"id"` // the session's id in the paths of its endpoints
}

// session is a spine.Session the Server made, with who may use it.
type session struct {
	id    string
	s     *spine.Session
	owner [sha256.Size]byte // SHA-256 of the token that made it; zero without tokens
	turn  chan struct{}     // holds a token while no request runs or snapshots it

	// With a store (store.go); owned by whoever holds turn.
	gen     uint64        // the generation in the store the live state descends from; 0: none yet
	dirty   bool          // the live state has runs the store lacks
	stale   bool          // the live state is not the store's line (a lost race, an undone run): reload
	pending chan struct{} // closed when a write after answering ends

	// Guarded by sessionTable.mu.
	busy int // requests holding it now (waiting included)
}

// sessionTable is the Server's sessions by id. It holds only sessions the
// Runner has open, or had until lately: one the Runner closed (after its
// SessionOptions.TTL without use) is forgotten when a request finds it, or
// by the next create, which drops every closed one. So the table never
// holds more than the Runner's SessionOptions.Max, and the ones closed since
// the last create.
type sessionTable struct {
	mu        sync.Mutex
	byID      map[string]*session
	bySession map[*spine.Session]*session // the same sessions, by their spine.Session
	perOwner  map[[sha256.Size]byte]int   // sessions in byID by owner
	closed    bool                        // Server.Close was called
}

// ended reports whether the Runner closed e's session.
func (e *session) ended() bool {
	select {
	case <-e.s.Done():
		return true
	default:
		return false
	}
}

// errNoSession is the answer for an id the table does not hold for the
// request's token.
var errNoSession = errors.New("no such session: it was never made, was deleted or expired, or another token made it")

// acquire returns the session id names for the owner, marked busy until
// release; nil when there is none. It returns spine.ErrClosed after Close.
func (t *sessionTable) acquire(id string, owner [sha256.Size]byte) (*session, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, spine.ErrClosed
	}
	e := t.byID[id]
	if e == nil || subtle.ConstantTimeCompare(e.owner[:], owner[:]) != 1 {
		return nil, errNoSession
	}
	if e.busy == 0 && e.ended() {
		t.remove(e)
		return nil, errNoSession
	}
	e.busy++
	return e, nil
}

// release ends a request's hold on e.
func (t *sessionTable) release(e *session) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e.busy--
}

// has reports whether e is still in the table.
func (t *sessionTable) has(e *session) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.byID[e.id] == e
}

// forget takes e out of the table; it reports whether e was there.
func (t *sessionTable) forget(e *session) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byID[e.id] != e {
		return false
	}
	t.remove(e)
	return true
}

// remove takes e out of the table; t.mu is held.
func (t *sessionTable) remove(e *session) {
	delete(t.byID, e.id)
	delete(t.bySession, e.s)
	if t.perOwner[e.owner]--; t.perOwner[e.owner] <= 0 {
		delete(t.perOwner, e.owner)
	}
}

// owned is how many sessions the table holds for owner.
func (t *sessionTable) owned(owner [sha256.Size]byte) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.perOwner[owner]
}

// add puts e in the table: spine.ErrClosed once the Server is closed, and
// an error matching spine.ErrTooManySessions when e's owner holds perOwner
// sessions already (perOwner > 0). It first drops the sessions the Runner
// closed.
func (t *sessionTable) add(e *session, perOwner int) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return spine.ErrClosed
	}
	for _, old := range t.byID {
		if old.busy == 0 && old.ended() {
			t.remove(old)
		}
	}
	if perOwner > 0 && t.perOwner[e.owner] >= perOwner {
		return errTooManyForToken(perOwner)
	}
	if old := t.byID[e.id]; old != nil {
		if old.owner != e.owner {
			return errTaken
		}
		return fmt.Errorf("%w: the session is in use; try again", errTaken)
	}
	t.put(e)
	return nil
}

// errTooManyForToken is the refusal of a session past Options.SessionsPerToken.
func errTooManyForToken(n int) error {
	return fmt.Errorf("%w: this token holds %d sessions, its limit; delete one first", spine.ErrTooManySessions, n)
}

// size returns how many sessions the table holds.
func (t *sessionTable) size() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.byID)
}

// closeAll marks the table closed and returns every session it held.
func (t *sessionTable) closeAll() []*session {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	all := make([]*session, 0, len(t.byID))
	for _, e := range t.byID {
		all = append(all, e)
		t.remove(e)
	}
	return all
}

// isClosed reports whether Close was called.
func (t *sessionTable) isClosed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.closed
}

// Close ends every session made through the Server (a run in flight in one
// stops) and makes the session endpoints answer 503 from then on. Call it
// once the http.Server has stopped serving, before closing the Runner (whose
// Close would end them too). It returns the first error of a session's
// Close: ctx ended before that session's operation in flight did.
//
// With Options.SessionStore, every session whose state the store lacks is
// written to it first (a drain loses no session), and Close returns the
// first write that failed.
func (s *Server) Close(ctx context.Context) error {
	var first error
	for _, e := range s.sessions.closeAll() {
		if s.opts.SessionStore != nil {
			if err := s.persist(ctx, e); err != nil {
				s.opts.Logger.Error("writing a session to the store at close failed", "session", e.id, "error", err)
				if first == nil {
					first = fmt.Errorf("session %s: %w", e.id, err)
				}
			}
		}
		if err := e.s.Close(ctx); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// newSessionID returns 128 random bits as 32 hex digits.
func newSessionID() string {
	id := make([]byte, 16)
	rand.Read(id) // never fails (crypto/rand)
	return hex.EncodeToString(id)
}

// owner returns who a session made by r belongs to: the SHA-256 of r's
// bearer token when the Server has tokens (r has passed the check, so it is
// one of them), else zero.
func (s *Server) owner(r *http.Request) [sha256.Size]byte {
	if len(s.tokens) == 0 {
		return [sha256.Size]byte{}
	}
	sum, _ := bearerDigest(r)
	return sum
}

// lookup returns the session of r's {id} for r's token, held until
// sessions.release; it answers the request and returns nil when there is
// none.
func (s *Server) lookup(w http.ResponseWriter, r *http.Request, start time.Time, op string) *session {
	e, err := s.sessions.acquire(r.PathValue("id"), s.owner(r))
	if errors.Is(err, errNoSession) && s.opts.SessionStore != nil {
		return s.load(w, r, start, op)
	}
	if err != nil {
		dropBody(w, r)
		s.sessionRefused(w, start, op, err)
		return nil
	}
	return e
}

// handleNewSession is POST /v1/sessions: it takes no body, or an empty
// JSON object (room for settings to come).
func (s *Server) handleNewSession(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.opts.MaxBody))
	if err != nil {
		s.bodyFailed(w, start, opCreate, err)
		return
	}
	if len(body) > 0 {
		if msg := needJSON.problem(r, "POST /v1/sessions with a body"); msg != "" {
			s.sessionOp(opCreate, kindUnsupportedMediaType)
			s.refuse(w, start, http.StatusUnsupportedMediaType, kindUnsupportedMediaType, msg)
			return
		}
		if err := decodeOne(body, &struct{}{}); err != nil {
			s.sessionOp(opCreate, kindBadRequest)
			s.refuse(w, start, http.StatusBadRequest, kindBadRequest, "POST /v1/sessions takes no body or {}: "+err.Error())
			return
		}
	}
	s.startSession(w, r, start, opCreate, "", func(ctx context.Context) (*spine.Session, error) {
		return s.newSession(ctx, r)
	})
}

// handleRestore is POST /v1/sessions/restore: the body is a snapshot, at
// most Options.MaxSnapshot bytes (a Content-Length over it is refused
// before anything is read). It streams into the session's Guest holding a
// slot, so the restores under way are bounded by the slots and each takes
// a bounded amount of memory beyond its Guest.
//
// With ?id=ID the session is restored under that id (letters, digits, '-'
// and '_', at most 64): a session the token holds under it is replaced; an
// id another token holds is refused (409 conflict).
func (s *Server) handleRestore(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	id := r.URL.Query().Get("id")
	if r.URL.Query().Has("id") {
		if err := sessionstore.CheckID(id); err != nil {
			dropBody(w, r)
			s.sessionOp(opRestore, kindBadRequest)
			s.refuse(w, start, http.StatusBadRequest, kindBadRequest, "POST /v1/sessions/restore?id=: "+err.Error())
			return
		}
	}
	if r.ContentLength > s.opts.MaxSnapshot {
		closeConn(w) // the body is left unread
		s.bodyFailed(w, start, opRestore, &http.MaxBytesError{Limit: s.opts.MaxSnapshot})
		return
	}
	s.startSession(w, r, start, opRestore, id, func(ctx context.Context) (*spine.Session, error) {
		body := &errReader{r: http.MaxBytesReader(w, r.Body, s.opts.MaxSnapshot)}
		sess, err := s.restoreSession(ctx, r, body)
		if body.err != nil && !errors.Is(body.err, io.EOF) {
			return nil, bodyError{body.err}
		}
		return sess, err
	})
}

// bodyError is a request body that could not be read.
type bodyError struct{ err error }

func (e bodyError) Error() string { return "reading the request body: " + e.err.Error() }
func (e bodyError) Unwrap() error { return e.err }

// startSession makes a session with open, holding a slot, and answers 201
// with its id: id, or a new one when id is "". With a store, the session's
// first generation is written before the answer.
func (s *Server) startSession(w http.ResponseWriter, r *http.Request, start time.Time, op, id string, open func(context.Context) (*spine.Session, error)) {
	if s.sessions.isClosed() {
		dropBody(w, r)
		s.sessionRefused(w, start, op, spine.ErrClosed)
		return
	}
	if n := s.opts.SessionsPerToken; n > 0 && s.sessions.owned(s.owner(r)) >= n {
		dropBody(w, r)
		s.sessionRefused(w, start, op, errTooManyForToken(n))
		return
	}
	free, ok := s.takeSlot(w, r, start, op)
	if !ok {
		return
	}
	replace := id != ""
	if !replace {
		id = newSessionID()
	}
	e := &session{id: id, owner: s.owner(r), turn: make(chan struct{}, 1)}
	err := func() error {
		defer free()
		ctx, cancel := context.WithTimeout(r.Context(), s.opts.MaxTimeout)
		defer cancel()
		sess, err := open(ctx)
		if err != nil {
			return err
		}
		e.s = sess
		if err := s.firstWrite(ctx, e, replace); err != nil {
			sess.Close(context.Background())
			return err
		}
		return nil
	}()
	if err != nil {
		var be bodyError
		if errors.As(err, &be) {
			s.bodyFailed(w, start, op, be.err)
			return
		}
		storeHeaders(w, err)
		s.sessionFailed(w, r, start, op, nil, err)
		return
	}
	e.turn <- struct{}{}
	if replace {
		s.replaceHeld(e)
	}
	if err := s.sessions.add(e, s.opts.SessionsPerToken); err != nil {
		e.s.Close(context.Background())
		s.sessionRefused(w, start, op, err)
		return
	}
	s.sessionOp(op, "ok")
	setSession(r.Context(), e.id)
	w.Header().Set("Location", "/v1/sessions/"+e.id)
	writeJSON(w, http.StatusCreated, SessionInfo{ID: e.id})
}

// handleSessionRun is POST /v1/sessions/{id}/run: POST /v1/run in the
// session.
func (s *Server) handleSessionRun(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	e := s.lookup(w, r, start, opRun)
	if e == nil {
		return
	}
	defer s.sessions.release(e)
	s.runJSON(w, r, start, e)
}

// handleSnapshot is GET /v1/sessions/{id}/snapshot.
func (s *Server) handleSnapshot(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	e := s.lookup(w, r, start, opSnapshot)
	if e == nil {
		return
	}
	defer s.sessions.release(e)
	ctx, cancel := context.WithTimeout(r.Context(), s.opts.MaxTimeout)
	defer cancel()
	if err := s.waitTurn(ctx, e); err != nil {
		s.sessionFailed(w, r, start, opSnapshot, e, err)
		return
	}
	var (
		out = &snapshotAnswer{w: w}
		err error
		ok  bool
	)
	func() {
		defer func() { e.turn <- struct{}{} }() // after the slot
		var free func()
		if free, ok = s.takeSlot(w, r, start, opSnapshot); !ok {
			return
		}
		defer free()
		// The snapshot streams to the client holding the slot: a client
		// that reads slowly has until the time limit.
		http.NewResponseController(w).SetWriteDeadline(time.Now().Add(s.opts.MaxTimeout))
		if err = s.refresh(ctx, e); err == nil {
			_, err = e.s.SnapshotTo(ctx, out)
		}
	}()
	switch {
	case !ok:
	case err != nil && out.started:
		// Part of a snapshot went out as a 200: end the connection, so
		// that the client sees a broken answer, never a short snapshot.
		s.sessionOp(opSnapshot, kindInternal)
		panic(http.ErrAbortHandler)
	case err != nil:
		storeHeaders(w, err)
		s.sessionFailed(w, r, start, opSnapshot, e, err)
	default:
		s.sessionOp(opSnapshot, "ok")
	}
}

// handleDeleteSession is DELETE /v1/sessions/{id}: the session ends at
// once, a run in flight in it stopped (its request is answered 404).
//
// With a store, the session is deleted there too, whichever replica held
// it: another replica's live copy finds it gone before its next run.
func (s *Server) handleDeleteSession(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	id, owner := r.PathValue("id"), s.owner(r)
	e, err := s.sessions.acquire(id, owner)
	if err == nil {
		defer s.sessions.release(e)
		if !s.sessions.forget(e) { // deleted by a request before this one
			e = nil
		} else {
			// Close stops a run in flight and waits for it to return, which
			// it does at once: not the request's ctx, which could leave it
			// half-closed.
			e.s.Close(context.Background())
		}
	}
	switch {
	case s.opts.SessionStore != nil && (e != nil || errors.Is(err, errNoSession)):
		ctx, cancel := s.storeCtx(r.Context())
		defer cancel()
		if err := s.deleteStored(ctx, id, owner); err != nil && !(e != nil && errors.Is(err, errNoSession)) {
			storeHeaders(w, err)
			s.sessionRefused(w, start, opDelete, err)
			return
		}
	case e == nil && err == nil:
		err = errNoSession
		fallthrough
	case err != nil:
		s.sessionRefused(w, start, opDelete, err)
		return
	}
	s.sessionOp(opDelete, "ok")
	w.WriteHeader(http.StatusNoContent)
}

// waitTurn waits until no other request runs or snapshots e, or ctx ends.
// The caller gives the turn back (e.turn <- struct{}{}).
func (s *Server) waitTurn(ctx context.Context, e *session) error {
	select {
	case <-e.turn:
		return nil
	default:
	}
	s.metrics.sessionWaits.Inc()
	defer s.metrics.sessionWaits.Dec()
	select {
	case <-e.turn:
		return nil
	case <-ctx.Done():
		return errTurn{ctx.Err()}
	}
}

// errTurn is a request that stopped waiting for its session's previous run.
type errTurn struct{ err error }

func (e errTurn) Error() string {
	return "the session's previous run or snapshot did not end in time: " + e.err.Error()
}
func (e errTurn) Unwrap() error { return e.err }

// takeSlot takes a run slot for a session operation, or answers 429 and
// returns false. free gives the slot back.
func (s *Server) takeSlot(w http.ResponseWriter, r *http.Request, start time.Time, op string) (free func(), ok bool) {
	select {
	case s.slots <- struct{}{}:
	default:
		dropBody(w, r)
		w.Header().Set("Retry-After", "1")
		s.sessionOp(op, kindOverloaded)
		s.refuse(w, start, http.StatusTooManyRequests, kindOverloaded, fmt.Sprintf("all %d run slots are busy; try again later", cap(s.slots)))
		return nil, false
	}
	s.metrics.inFlight.Inc()
	return func() {
		<-s.slots
		s.metrics.inFlight.Dec()
	}, true
}

// sessionFailed answers a session operation that failed with err; e is the
// session, nil for create and restore.
func (s *Server) sessionFailed(w http.ResponseWriter, r *http.Request, start time.Time, op string, e *session, err error) {
	status, kind, msg := s.sessionError(r.Context(), e, err)
	if kind == kindGuest {
		s.opts.Logger.Error("session operation failed", "operation", op, "status", status, "error", msg)
	}
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	s.sessionOp(op, kind)
	s.refuse(w, start, status, kind, msg)
}

// sessionRefused answers a session operation refused before it began: no
// such session (404), or the Server closed (503).
func (s *Server) sessionRefused(w http.ResponseWriter, start time.Time, op string, err error) {
	status, kind, msg := s.sessionError(context.Background(), nil, err)
	s.sessionOp(op, kind)
	s.refuse(w, start, status, kind, msg)
}

// sessionError maps the error of an operation on session e (nil: none yet)
// to a status, an error kind and a message. reqCtx is the request's
// context. A session the Runner closed (its TTL, say) or that a DELETE
// ended during the operation is forgotten and answered 404, as an unknown
// id is.
func (s *Server) sessionError(reqCtx context.Context, e *session, err error) (int, string, string) {
	gone := errors.Is(err, spine.ErrSessionClosed) || errors.Is(err, errNoSession)
	if e != nil && (gone || !s.sessions.has(e)) {
		s.sessions.forget(e)
		gone = true
	}
	if status, kind, msg, ok := storeAnswer(err); ok {
		return status, kind, msg
	}
	if s.cutDone() {
		return http.StatusServiceUnavailable, kindClosed, "the server shut down before the operation ended (its grace period ran out)"
	}
	var turn errTurn
	switch {
	case gone && s.sessions.isClosed(), errors.Is(err, spine.ErrClosed):
		return http.StatusServiceUnavailable, kindClosed, "the server is shutting down"
	case gone:
		return http.StatusNotFound, kindNotFound, errNoSession.Error()
	case reqCtx.Err() != nil:
		return statusClientClosed, kindCanceled, "the client went away"
	case errors.As(err, &turn) && errors.Is(err, context.DeadlineExceeded):
		return http.StatusRequestTimeout, kindTimeout, turn.Error() + "; it is left to finish"
	case errors.Is(err, spine.ErrSnapshotTooLarge):
		return http.StatusConflict, kindTooLarge, err.Error()
	case errors.Is(err, spine.ErrSessionState):
		return http.StatusConflict, kindBadSnapshot, err.Error()
	}
	outcome := spine.Classify(err)
	status, ok := outcomeStatus[outcome]
	if !ok || outcome == spine.OutcomeOK {
		return http.StatusInternalServerError, kindInternal, err.Error()
	}
	return status, string(outcome), err.Error()
}

// bodyFailed answers a request whose body could not be read.
func (s *Server) bodyFailed(w http.ResponseWriter, start time.Time, op string, err error) {
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		s.sessionOp(op, kindTooLarge)
		s.refuse(w, start, http.StatusRequestEntityTooLarge, kindTooLarge, fmt.Sprintf("the request body is over the %d-byte limit", tooBig.Limit))
	case errors.Is(err, os.ErrDeadlineExceeded):
		s.sessionOp(op, kindReadTimeout)
		s.refuse(w, start, http.StatusRequestTimeout, kindReadTimeout, "the request body did not arrive within the server's read timeout")
	default:
		s.sessionOp(op, kindBadRequest)
		s.refuse(w, start, http.StatusBadRequest, kindBadRequest, "reading the request body: "+err.Error())
	}
}

// sessionOp counts a session operation (not a run: runs count in
// spine_runs_total) by its outcome.
func (s *Server) sessionOp(op, outcome string) {
	if op != opRun {
		s.metrics.sessionOps.WithLabelValues(op, outcome).Inc()
	}
}

// The session operations, label values of spine_session_operations_total.
const (
	opCreate   = "create"
	opRestore  = "restore"
	opSnapshot = "snapshot"
	opDelete   = "delete"
	opRun      = "run" // counted in spine_runs_total instead
)

// decodeOne decodes data, one JSON value and nothing after it, into v,
// refusing unknown fields.
func decodeOne(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if extra := dec.Decode(&struct{}{}); extra != io.EOF {
		if extra == nil {
			return errors.New("more than one JSON value in the body")
		}
		return extra
	}
	return nil
}

// sessionRunError revises the answer (status, e) to a run in session sess
// that failed with err: a session closed under the run — deleted, expired,
// or the Server closing — is answered as an unknown id is (404; 503 once the
// Server is closed).
func (s *Server) sessionRunError(reqCtx context.Context, sess *session, err error, status int, e *Error) (int, *Error) {
	if status, kind, msg, ok := storeAnswer(err); ok {
		return status, &Error{Kind: kind, Message: msg}
	}
	if errors.Is(err, errNoSession) {
		status, kind, msg := s.sessionError(reqCtx, sess, err)
		return status, &Error{Kind: kind, Message: msg}
	}
	if !errors.Is(err, spine.ErrSessionClosed) && s.sessions.has(sess) {
		return status, e
	}
	status, kind, msg := s.sessionError(reqCtx, sess, err)
	return status, &Error{Kind: kind, Message: msg}
}
