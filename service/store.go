package service

import (
	"bufio"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/sessionstore"
)

// Sessions in a store (Options.SessionStore; docs/scaling.md, and
// docs/rationale.md "Sessions in an object store"): a session's id is
// global, its state is its newest generation in the store, and this
// Server's live sessions are a cache of it. A request for an id the Server
// does not hold loads the session from the store, under the same id, for
// the token that owns it. Before each run the Server asks the store whether
// another replica wrote a newer generation, and loads that one if so. After
// each run it writes generation n+1 create-only (Options.SessionWrite says
// when): a replica that lost the race, or held an older generation, gets a
// conflict and reloads.

// WritePolicy is when a Server writes a session to its store; the policies
// are sessionstore's, as the MCP server's are.
type WritePolicy = sessionstore.WritePolicy

const (
	// WriteRun writes after each run, before answering it: a run answered
	// 200 or 422 is in the store, and a crash loses no answered run. A run
	// whose write fails is answered with the error (409 conflict, 503
	// store_unavailable) and its effect on the session's state is undone.
	WriteRun = sessionstore.WriteRun
	// WriteAnswer writes after answering: a run's latency does not include
	// the write, and a crash (or a lost race) loses the runs answered since
	// the last write that landed.
	WriteAnswer = sessionstore.WriteAnswer
	// WriteHibernate writes only when the session leaves the replica's
	// live Guests: when the Runner hibernates it (idle, or making room; with
	// the Runner's SessionOptions.OnHibernate set to Server.Hibernated), and
	// when the Server closes (a drain). A crash loses everything since;
	// without sticky routing, another replica serves the older state. For
	// sessions that are scratch space, or one replica that keeps its
	// sessions across restarts.
	WriteHibernate = sessionstore.WriteHibernate
)

// ParseWritePolicy returns the policy named s.
func ParseWritePolicy(s string) (WritePolicy, error) { return sessionstore.ParseWritePolicy(s) }

// The error kinds of a session store.
const (
	// kindConflict (409): another replica wrote the session first; this run's
	// effect on the state is undone and the next request loads the newer one.
	kindConflict = "conflict"
	// kindStoreUnavailable (503): the store could not be read or written.
	kindStoreUnavailable = "store_unavailable"
	// kindOtherImage (503): the stored snapshot is of another Guest build;
	// a replica of that build can restore it (header Spine-Snapshot-Image).
	kindOtherImage = "other_image"
)

// errTaken is a restore under an id another token owns.
var errTaken = errors.New("that session id is taken")

// storeError is a store that failed.
type storeError struct{ err error }

func (e storeError) Error() string { return "the session store failed: " + e.err.Error() }
func (e storeError) Unwrap() error { return e.err }

// conflictError is a write that lost to another replica's.
type conflictError struct{ err error }

func (e conflictError) Error() string {
	return "another replica ran this session at the same time and its run was stored first; this run's effect on the session is undone (" + e.err.Error() + ")"
}
func (e conflictError) Unwrap() error { return e.err }

// imageError is a stored snapshot of another Guest build.
type imageError struct{ image string }

func (e imageError) Error() string {
	return "the session's snapshot was taken by another Guest build (image " + e.image + "); a replica of that build can serve it"
}

// notStoredError is a run whose state could not be snapshotted to store.
type notStoredError struct{ err error }

func (e notStoredError) Error() string {
	return "the run's state could not be stored, so its effect on the session is undone: " + e.err.Error()
}
func (e notStoredError) Unwrap() error { return e.err }

// storeAnswer maps a store's error to a status, a kind and a message; ok is
// false for other errors.
func storeAnswer(err error) (status int, kind, msg string, ok bool) {
	var (
		conflict conflictError
		image    imageError
		store    storeError
		state    notStoredError
	)
	switch {
	case errors.As(err, &conflict), errors.Is(err, errTaken):
		return http.StatusConflict, kindConflict, err.Error(), true
	case errors.As(err, &image):
		return http.StatusServiceUnavailable, kindOtherImage, err.Error(), true
	case errors.As(err, &state) && errors.Is(err, spine.ErrSessionState):
		return http.StatusConflict, kindBadSnapshot, err.Error(), true
	case errors.As(err, &state) && (errors.Is(err, sessionstore.ErrTooLarge) || errors.Is(err, spine.ErrSnapshotTooLarge)),
		errors.As(err, &store) && errors.Is(err, sessionstore.ErrTooLarge):
		return http.StatusConflict, kindTooLarge, err.Error(), true
	case errors.As(err, &store), errors.As(err, &state):
		return http.StatusServiceUnavailable, kindStoreUnavailable, err.Error(), true
	}
	return 0, "", "", false
}

// storeHeaders sets the headers of a store's error answer: Retry-After
// for the passing ones, and the image a replica needs for the other build.
func storeHeaders(w http.ResponseWriter, err error) {
	var image imageError
	if errors.As(err, &image) {
		w.Header().Set("Spine-Snapshot-Image", image.image)
	}
	if _, kind, _, ok := storeAnswer(err); ok && kind != kindConflict && kind != kindBadSnapshot && kind != kindTooLarge {
		w.Header().Set("Retry-After", "1")
	}
}

// ownerHex is how an owner is kept in the store (sessionstore.OwnerOf).
func ownerHex(owner [sha256.Size]byte) string { return sessionstore.OwnerOf(owner) }

// ownedBy reports whether meta's session belongs to owner, in constant
// time.
func ownedBy(meta sessionstore.Meta, owner [sha256.Size]byte) bool {
	return meta.OwnedBy(ownerHex(owner))
}

// storeCtx is a context for a store operation that must not end with the
// request (a write of a run that happened), bounded by MaxTimeout.
func (s *Server) storeCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), s.opts.MaxTimeout)
}

// fetch reads id's newest snapshot for owner and restores it. A session
// that is not there, deleted, or another token's is errNoSession.
func (s *Server) fetch(ctx context.Context, id string, owner [sha256.Size]byte) (*spine.Session, uint64, error) {
	if sessionstore.CheckID(id) != nil {
		return nil, 0, errNoSession
	}
	rd, meta, err := s.opts.SessionStore.Get(ctx, id, s.opts.MaxSnapshot)
	if err == nil {
		defer rd.Close()
	}
	switch {
	case errors.Is(err, sessionstore.ErrNotFound):
		return nil, 0, errNoSession
	case err != nil:
		return nil, 0, storeError{err}
	case !ownedBy(meta, owner):
		return nil, 0, errNoSession
	case meta.Image != s.runner.ImageKey():
		return nil, 0, imageError{meta.Image}
	}
	// The snapshot streams from the store into the Guest's pages.
	src := &errReader{r: rd}
	sess, err := s.restoreFor(ctx, owner, bufio.NewReaderSize(src, sessionstore.ReadMemory))
	if src.err != nil && !errors.Is(src.err, io.EOF) {
		if sess != nil {
			sess.Close(context.Background())
		}
		return nil, 0, storeError{src.err}
	}
	return sess, meta.Generation, err
}

// load makes the session id names, which the Server does not hold, from the
// store, holding a slot, and returns it acquired (as sessions.acquire).
func (s *Server) load(w http.ResponseWriter, r *http.Request, start time.Time, op string) *session {
	free, ok := s.takeSlot(w, r, start, op)
	if !ok {
		return nil
	}
	id, owner := r.PathValue("id"), s.owner(r)
	sess, gen, err := func() (*spine.Session, uint64, error) {
		defer free()
		ctx, cancel := context.WithTimeout(r.Context(), s.opts.MaxTimeout)
		defer cancel()
		return s.fetch(ctx, id, owner)
	}()
	if err != nil {
		dropBody(w, r)
		storeHeaders(w, err)
		s.sessionFailed(w, r, start, op, nil, err)
		return nil
	}
	s.metrics.storeOps.WithLabelValues("load").Inc()
	e := &session{id: id, s: sess, owner: owner, turn: make(chan struct{}, 1), gen: gen}
	e.turn <- struct{}{}
	held, err := s.sessions.addOrAcquire(e)
	if held != e {
		sess.Close(context.Background()) // loaded by another request meanwhile
	}
	if err != nil {
		dropBody(w, r)
		s.sessionRefused(w, start, op, err)
		return nil
	}
	return held
}

// settle waits for a write after answering (WriteAnswer) of e to end; the
// caller holds e's turn.
func (e *session) settle() {
	if e.pending != nil {
		<-e.pending
		e.pending = nil
	}
}

// refresh makes e's live state the store's newest generation, if another
// replica wrote a newer one or e's own state was left behind (stale); the
// caller holds e's turn and a slot.
func (s *Server) refresh(ctx context.Context, e *session) error {
	if s.opts.SessionStore == nil {
		return nil
	}
	e.settle()
	if !e.stale {
		if s.opts.SessionWrite == WriteHibernate {
			return nil // the replica's copy is the newest: sticky routing
		}
		newer, err := s.opts.SessionStore.Newer(ctx, e.id, e.gen)
		if err != nil {
			return storeError{err}
		}
		if !newer {
			return nil
		}
	}
	sess, gen, err := s.fetch(ctx, e.id, e.owner)
	if errors.Is(err, errNoSession) {
		if s.sessions.forget(e) {
			e.s.Close(context.Background())
		}
		return err
	}
	if err != nil {
		return err
	}
	old, ok := s.sessions.swap(e, sess)
	if !ok {
		sess.Close(context.Background())
		return errNoSession
	}
	old.Close(context.Background())
	e.gen, e.stale, e.dirty = gen, false, false
	s.metrics.storeOps.WithLabelValues("refresh").Inc()
	return nil
}

// commit stores what a run of e left (runErr is the run's error), per
// Options.SessionWrite, and returns the run's error as its answer should
// say it; the caller holds e's turn.
func (s *Server) commit(ctx context.Context, e *session, runErr error) error {
	if s.opts.SessionStore == nil {
		return runErr
	}
	var pyErr *spine.PythonError
	if runErr != nil && !errors.As(runErr, &pyErr) {
		if e.s.Err() != nil {
			e.stale = true // lost: the store holds the state before this run
		}
		return runErr
	}
	e.dirty = true
	if s.opts.SessionWrite == WriteHibernate {
		return runErr
	}
	ctx, cancel := s.storeCtx(ctx)
	if s.opts.SessionWrite == WriteAnswer {
		// The snapshot streams to the store after the answer; e's next
		// request waits for it (settle), so it stores this run's state.
		done := make(chan struct{})
		e.pending = done
		go func() {
			defer close(done)
			defer cancel()
			if err := s.put(ctx, e, s.live(ctx, e)); err != nil {
				s.opts.Logger.Error("writing a session after answering failed", "session", e.id, "error", err)
			}
		}()
		return runErr
	}
	defer cancel()
	if err := s.put(ctx, e, s.live(ctx, e)); err != nil {
		return err
	}
	return runErr
}

// live is the snapshot of e's session, streamed from its Guest's pages.
func (s *Server) live(ctx context.Context, e *session) func(io.Writer) error {
	return func(w io.Writer) error {
		bw := bufio.NewWriterSize(w, snapshotBuffer)
		if _, err := e.s.SnapshotTo(ctx, bw); err != nil {
			return err
		}
		return bw.Flush()
	}
}

// snapshotBuffer gathers a snapshot's small writes into a store's.
const snapshotBuffer = 64 << 10

// StreamMemory is the most memory a Server takes, beyond the Guest's own,
// to write a session to its store or load one from it, whatever the
// session's size: the snapshot's stream (spine.SnapshotStreamMemory), the
// store's upload or download buffers (sessionstore.WriteMemory), and a
// buffer. docs/sessions.md gives the figure measured for a 200 MB session.
const StreamMemory = spine.SnapshotStreamMemory + sessionstore.WriteMemory + snapshotBuffer

// put writes the snapshot write writes as e's next generation, at most
// Options.MaxSnapshot bytes (a larger one could never be loaded) and what
// its token's StoreBytes leaves (sessionstore.PutOwned). On a
// conflict e is stale: its next request loads the store's. A snapshot that
// could not be made, or is over the cap, is notStoredError: under WriteRun
// the run is undone; under WriteAnswer the replica keeps e live, ahead of
// the store, as when the store fails.
func (s *Server) put(ctx context.Context, e *session, write func(io.Writer) error) error {
	meta := sessionstore.Meta{Generation: e.gen + 1, Owner: ownerHex(e.owner), Image: s.runner.ImageKey()}
	var made error
	keep := func(w io.Writer) error {
		made = write(w)
		return made
	}
	var err error
	if name, limit := s.storeLimit(e.owner); limit > 0 {
		err = s.opts.SessionStore.PutOwned(ctx, e.id, meta, s.opts.MaxSnapshot, limit, keep)
		var full *sessionstore.OwnerFullError
		if errors.As(err, &full) {
			err = fmt.Errorf("token %q is at its store_bytes: %w", name, err)
		}
	} else {
		err = s.opts.SessionStore.Put(ctx, e.id, meta, s.opts.MaxSnapshot, keep)
	}
	switch {
	case errors.Is(err, sessionstore.ErrConflict):
		e.stale = true
		s.metrics.storeOps.WithLabelValues("conflict").Inc()
		return conflictError{err}
	case made != nil || errors.Is(err, sessionstore.ErrTooLarge):
		if errors.Is(err, sessionstore.ErrTooLarge) {
			made = err
		}
		if s.opts.SessionWrite != WriteAnswer {
			e.stale = true
		}
		return notStoredError{made}
	case err != nil:
		if s.opts.SessionWrite == WriteRun {
			e.stale = true // the answer says the run failed: undo it
		}
		return storeError{err}
	}
	e.gen, e.dirty = meta.Generation, false
	s.metrics.storeOps.WithLabelValues("write").Inc()
	return nil
}

// persist writes e to the store if the store lacks its state: at Close.
func (s *Server) persist(ctx context.Context, e *session) error {
	select {
	case <-e.turn:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { e.turn <- struct{}{} }()
	e.settle()
	if e.stale || !e.dirty && e.gen > 0 || e.s.Err() != nil {
		return nil
	}
	return s.put(ctx, e, s.live(ctx, e))
}

// firstWrite gives a session made by create or restore its first
// generation in the store: 1 for a new id, or the one after the newest for
// a restore under an id the token owns. The caller holds e's turn.
func (s *Server) firstWrite(ctx context.Context, e *session, restore bool) error {
	st := s.opts.SessionStore
	if st == nil {
		return nil
	}
	if restore {
		meta, err := st.Head(ctx, e.id)
		switch {
		case errors.Is(err, sessionstore.ErrNotFound):
		case err != nil:
			return storeError{err}
		case !ownedBy(meta, e.owner):
			return errTaken
		default:
			e.gen = meta.Generation
		}
	}
	e.dirty = true
	if s.opts.SessionWrite == WriteHibernate && !restore {
		return nil
	}
	return s.put(ctx, e, s.live(ctx, e))
}

// deleteStored deletes id from the store for owner: errNoSession when the
// store holds no session of the owner's under id.
func (s *Server) deleteStored(ctx context.Context, id string, owner [sha256.Size]byte) error {
	st := s.opts.SessionStore
	if sessionstore.CheckID(id) != nil {
		return errNoSession
	}
	meta, err := st.Head(ctx, id)
	switch {
	case errors.Is(err, sessionstore.ErrNotFound):
		return errNoSession
	case err != nil:
		return storeError{err}
	case meta.Deleted || !ownedBy(meta, owner):
		return errNoSession
	}
	if err := st.Delete(ctx, id); err != nil {
		return storeError{err}
	}
	return nil
}

// replaceHeld ends the session the Server holds under e's id for e's owner,
// which a restore under that id replaces.
func (s *Server) replaceHeld(e *session) {
	old, err := s.sessions.acquire(e.id, e.owner)
	if err != nil {
		return
	}
	defer s.sessions.release(old)
	if s.sessions.forget(old) {
		old.s.Close(context.Background())
	}
}

// sessionRun is the run target of a session: the store's newest state
// first, then the run, then its write (Options.SessionWrite). The caller
// holds e's turn and a slot.
func (s *Server) sessionRun(e *session) func(context.Context, spine.Request) (*spine.Output, error) {
	return func(ctx context.Context, req spine.Request) (*spine.Output, error) {
		if err := s.refresh(ctx, e); err != nil {
			return nil, err
		}
		out, err := e.s.Run(ctx, req)
		return out, s.commit(ctx, e, err)
	}
}

// addOrAcquire puts e, loaded from the store, in the table and returns it
// acquired; if a request loaded the same id meanwhile, it returns that one
// instead, acquired.
func (t *sessionTable) addOrAcquire(e *session) (*session, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, spine.ErrClosed
	}
	if held := t.byID[e.id]; held != nil && !(held.busy == 0 && held.ended()) {
		held.busy++
		return held, nil
	} else if held != nil {
		t.remove(held)
	}
	t.put(e)
	e.busy++
	return e, nil
}

// swap gives e the spine session sess in place of the one it had, which it
// returns; ok is false when e is no longer in the table.
func (t *sessionTable) swap(e *session, sess *spine.Session) (old *spine.Session, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byID[e.id] != e {
		return nil, false
	}
	delete(t.bySession, e.s)
	old, e.s = e.s, sess
	t.bySession[sess] = e
	return old, true
}

// put adds e to the table; t.mu is held.
func (t *sessionTable) put(e *session) {
	t.byID[e.id] = e
	t.bySession[e.s] = e
	t.perOwner[e.owner]++
}

// bySpine returns the session whose spine.Session is sess, or nil.
func (t *sessionTable) bySpine(sess *spine.Session) *session {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.bySession[sess]
}

// Hibernated writes a session of the Server's that its Runner hibernated
// to the store, if the store lacks its state; it is the Runner's
// SessionOptions.OnHibernate (set it to this method), and what
// WriteHibernate writes on besides Close. A session a request holds now is
// left for that request's own write, or for Close.
func (s *Server) Hibernated(sess *spine.Session, snapshot io.Reader) {
	if s.opts.SessionStore == nil {
		return
	}
	e := s.sessions.bySpine(sess)
	if e == nil {
		return
	}
	select {
	case <-e.turn:
	default:
		return
	}
	defer func() { e.turn <- struct{}{} }()
	if e.pending != nil {
		select {
		case <-e.pending:
			e.pending = nil
		default:
			// A write after answering is under way, of this same state: it
			// waits for this hibernation to end, which must not wait for it.
			return
		}
	}
	if e.stale || !e.dirty && e.gen > 0 {
		return
	}
	ctx, cancel := s.storeCtx(context.Background())
	defer cancel()
	err := s.put(ctx, e, func(w io.Writer) error {
		_, err := io.Copy(w, snapshot)
		return err
	})
	if err != nil {
		s.opts.Logger.Error("writing a hibernated session to the store failed", "session", e.id, "error", err)
	}
}
