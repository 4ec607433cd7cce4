package service

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/door"
	"github.com/spine-run/spine/fleet"
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

// sessionDesk serves the session endpoints: it translates them to the Fleet
// the Server holds (package fleet), and words the Fleet's errors as HTTP
// answers for them and for the session runs of run.go and paused.go. It
// reaches through the Server it embeds for what every request needs (slots,
// the owner, refusals, metrics).
type sessionDesk struct {
	*Server
}

// SessionInfo is the body of the answer to POST /v1/sessions and POST
// /v1/sessions/restore.
type SessionInfo struct {
	ID string `json:"id"` // the session's id in the paths of its endpoints
}

// Close ends every session made through the Server (a run in flight in one
// stops) and makes the session endpoints answer 503 from then on. Call it
// once the http.Server has stopped serving, before closing the Runner (whose
// Close would end them too). It returns the first error of a session's
// Close: ctx ended before that session's operation in flight did.
//
// With Options.SessionStore, every session whose state the store lacks is
// written to it first (a drain loses no session), and Close returns the
// first write that failed. Without one, the sessions are lost, and Close
// logs how many at WARN (fleet.Fleet.Close). Runs paused for their
// callers' tool results are stopped first: they hold their sessions.
func (s *Server) Close(ctx context.Context) error {
	s.desk.paused.stopAll()
	return s.fleet.Close(ctx)
}

// owner returns who a session made by r belongs to: the SHA-256 of r's
// bearer token in hex when the Server has tokens (r has passed the check,
// so it is one of them), else "".
func (s *Server) owner(r *http.Request) string {
	if s.tenants.Len() == 0 {
		return ""
	}
	return door.Owner(r.Header)
}

// lookup returns the session of r's {id} for r's token, in use until
// fleet.Release: held, or loaded from the store holding a slot. It answers
// the request and returns nil when there is none.
func (s *sessionDesk) lookup(w http.ResponseWriter, r *http.Request, start time.Time, op string) *fleet.Session {
	id, owner := r.PathValue("id"), s.owner(r)
	e, err := s.fleet.Get(id, owner)
	if errors.Is(err, fleet.ErrNoSession) && s.opts.SessionStore != nil {
		free, ok := s.takeSlot(w, r, start, op)
		if !ok {
			return nil
		}
		func() {
			defer free()
			ctx, cancel := context.WithTimeout(r.Context(), s.opts.MaxTimeout)
			defer cancel()
			e, err = s.fleet.Load(ctx, id, owner)
		}()
	}
	if err != nil {
		dropBody(w, r)
		storeHeaders(w, err)
		s.sessionFailed(w, r, start, op, nil, err)
		return nil
	}
	return e
}

// handleNewSession is POST /v1/sessions: it takes no body, or an empty
// JSON object (room for settings to come).
func (s *sessionDesk) handleNewSession(w http.ResponseWriter, r *http.Request) {
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
	s.startSession(w, r, start, opCreate, func(ctx context.Context) (string, error) {
		return s.fleet.Create(ctx, s.owner(r))
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
func (s *sessionDesk) handleRestore(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	id := r.URL.Query().Get("id")
	if r.URL.Query().Has("id") {
		if err := fleet.CheckID(id); err != nil {
			dropBody(w, r)
			s.sessionOp(opRestore, kindBadRequest)
			s.refuse(w, start, http.StatusBadRequest, kindBadRequest, "POST /v1/sessions/restore?id=: "+err.Error())
			return
		}
	}
	max := s.fleet.Options().MaxSnapshot
	if r.ContentLength > max {
		closeConn(w) // the body is left unread
		s.bodyFailed(w, start, opRestore, &http.MaxBytesError{Limit: max})
		return
	}
	s.startSession(w, r, start, opRestore, func(ctx context.Context) (string, error) {
		return s.fleet.Restore(ctx, s.owner(r), id, http.MaxBytesReader(w, r.Body, max))
	})
}

// startSession makes a session with start, holding a slot, and answers
// 201 with its id.
func (s *sessionDesk) startSession(w http.ResponseWriter, r *http.Request, begin time.Time, op string, start func(context.Context) (string, error)) {
	if err := s.fleet.Admit(s.owner(r)); err != nil {
		dropBody(w, r)
		s.sessionRefused(w, begin, op, err)
		return
	}
	free, ok := s.takeSlot(w, r, begin, op)
	if !ok {
		return
	}
	id, err := func() (string, error) {
		defer free()
		ctx, cancel := context.WithTimeout(r.Context(), s.opts.MaxTimeout)
		defer cancel()
		return start(ctx)
	}()
	if err != nil {
		var se *fleet.SourceError // the request body failed
		if errors.As(err, &se) {
			s.bodyFailed(w, begin, op, se.Err)
			return
		}
		storeHeaders(w, err)
		s.sessionFailed(w, r, begin, op, nil, err)
		return
	}
	s.sessionOp(op, "ok")
	door.SetSession(r.Context(), id)
	w.Header().Set("Location", "/v1/sessions/"+id)
	writeJSON(w, http.StatusCreated, SessionInfo{ID: id})
}

// handleSessionRun is POST /v1/sessions/{id}/run: POST /v1/run in the
// session.
func (s *sessionDesk) handleSessionRun(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	e := s.lookup(w, r, start, opRun)
	if e == nil {
		return
	}
	kept := false
	defer func() {
		if !kept { // a paused run releases it when it ends
			s.fleet.Release(e)
		}
	}()
	kept = s.runJSON(w, r, start, e)
}

// handleSnapshot is GET /v1/sessions/{id}/snapshot.
func (s *sessionDesk) handleSnapshot(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	e := s.lookup(w, r, start, opSnapshot)
	if e == nil {
		return
	}
	defer s.fleet.Release(e)
	ctx, cancel := context.WithTimeout(r.Context(), s.opts.MaxTimeout)
	defer cancel()
	if err := e.Lock(ctx); err != nil {
		s.sessionFailed(w, r, start, opSnapshot, e, err)
		return
	}
	var (
		out = &snapshotAnswer{w: w}
		err error
		ok  bool
	)
	func() {
		defer e.Unlock() // after the slot
		var free func()
		if free, ok = s.takeSlot(w, r, start, opSnapshot); !ok {
			return
		}
		defer free()
		// The snapshot streams to the client holding the slot: a client
		// that reads slowly has until the time limit.
		http.NewResponseController(w).SetWriteDeadline(time.Now().Add(s.opts.MaxTimeout))
		_, err = s.fleet.Snapshot(ctx, e, out)
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
func (s *sessionDesk) handleDeleteSession(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), s.opts.MaxTimeout)
	defer cancel()
	if err := s.fleet.Delete(ctx, r.PathValue("id"), s.owner(r)); err != nil {
		storeHeaders(w, err)
		s.sessionRefused(w, start, opDelete, err)
		return
	}
	s.sessionOp(opDelete, "ok")
	w.WriteHeader(http.StatusNoContent)
}

// takeSlot takes a run slot for a session operation, or answers 429 and
// returns false. free gives the slot back.
func (s *sessionDesk) takeSlot(w http.ResponseWriter, r *http.Request, start time.Time, op string) (free func(), ok bool) {
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
func (s *sessionDesk) sessionFailed(w http.ResponseWriter, r *http.Request, start time.Time, op string, e *fleet.Session, err error) {
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
func (s *sessionDesk) sessionRefused(w http.ResponseWriter, start time.Time, op string, err error) {
	status, kind, msg := s.sessionError(context.Background(), nil, err)
	s.sessionOp(op, kind)
	s.refuse(w, start, status, kind, msg)
}

// sessionError maps the error of an operation on session e (nil: none yet)
// to a status, an error kind and a message. reqCtx is the request's
// context. A session the Runner closed (its TTL, say) or that a DELETE
// ended during the operation is forgotten and answered 404, as an unknown
// id is.
func (s *sessionDesk) sessionError(reqCtx context.Context, e *fleet.Session, err error) (int, string, string) {
	gone := errors.Is(err, spine.ErrSessionClosed) || errors.Is(err, fleet.ErrNoSession)
	if e != nil && (gone || !s.fleet.Held(e)) {
		s.fleet.Forget(e)
		gone = true
	}
	if status, kind, msg, ok := storeAnswer(err); ok {
		return status, kind, msg
	}
	if s.drain.cutDone() {
		return http.StatusServiceUnavailable, kindClosed, "the server shut down before the operation ended (its grace period ran out)"
	}
	var turn *fleet.TurnError
	switch {
	case gone && s.fleet.Closed(), errors.Is(err, spine.ErrClosed):
		return http.StatusServiceUnavailable, kindClosed, "the server is shutting down"
	case gone:
		return http.StatusNotFound, kindNotFound, fleet.ErrNoSession.Error()
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
func (s *sessionDesk) bodyFailed(w http.ResponseWriter, start time.Time, op string, err error) {
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
func (s *sessionDesk) sessionOp(op, outcome string) {
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
func (s *sessionDesk) sessionRunError(reqCtx context.Context, sess *fleet.Session, err error, status int, e *Error) (int, *Error) {
	if status, kind, msg, ok := storeAnswer(err); ok {
		return status, &Error{Kind: kind, Message: msg}
	}
	if errors.Is(err, fleet.ErrNoSession) {
		status, kind, msg := s.sessionError(reqCtx, sess, err)
		return status, &Error{Kind: kind, Message: msg}
	}
	if !errors.Is(err, spine.ErrSessionClosed) && s.fleet.Held(sess) {
		return status, e
	}
	status, kind, msg := s.sessionError(reqCtx, sess, err)
	return status, &Error{Kind: kind, Message: msg}
}
