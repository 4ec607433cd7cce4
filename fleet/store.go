package fleet

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/sessionstore"
)

// The store protocol (docs/scaling.md; docs/rationale.md "Sessions in an
// object store"): a session's state is its newest generation in the store,
// and this process's live sessions are a cache of it. A session this
// process does not hold is loaded under the same id, for its owner. Before
// each run the Fleet asks the store whether another replica wrote a newer
// generation, and loads it if so (not under WriteHibernate, whose replicas
// are sticky). After each run it writes generation n+1 create-only, when
// Options.Write says: a replica that lost the race, or held an older
// generation, gets a conflict, its run's effect is undone, and its next
// operation loads the newer one.

// storeCtx is a context for a store operation that must not end with its
// request (the write of a run that happened), bounded by StoreTimeout.
func (f *Fleet) storeCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), f.opts.StoreTimeout)
}

// open makes a new session in owner's share.
func (f *Fleet) open(ctx context.Context, owner string) (*spine.Session, error) {
	if t := f.share(owner).Tenant; t != nil {
		return t.NewSession(ctx)
	}
	return f.runner.NewSession(ctx)
}

// restore restores the snapshot rd reads in owner's share.
func (f *Fleet) restore(ctx context.Context, owner string, rd io.Reader) (*spine.Session, error) {
	if t := f.share(owner).Tenant; t != nil {
		return t.RestoreFrom(ctx, rd)
	}
	return f.runner.RestoreFrom(ctx, rd)
}

// errReader keeps the first error of the reader it wraps, so that a
// source that failed mid-read is told from a bad snapshot.
type errReader struct {
	r   io.Reader
	err error
}

func (b *errReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err != nil && b.err == nil {
		b.err = err
	}
	return n, err
}

// fetch reads id's newest snapshot for owner and restores it. A session
// that is not there, deleted, or another owner's is ErrNoSession.
func (f *Fleet) fetch(ctx context.Context, id, owner string) (*spine.Session, uint64, error) {
	if CheckID(id) != nil {
		return nil, 0, ErrNoSession
	}
	rd, meta, err := f.opts.Store.Get(ctx, id, f.opts.MaxSnapshot)
	if err == nil {
		defer rd.Close()
	}
	switch {
	case errors.Is(err, sessionstore.ErrNotFound):
		return nil, 0, ErrNoSession
	case errors.Is(err, sessionstore.ErrTooLarge):
		return nil, 0, f.unrestorable(id, 0, err)
	case err != nil:
		return nil, 0, &StoreError{err}
	case !meta.OwnedBy(owner):
		return nil, 0, ErrNoSession
	case meta.Image != f.runner.ImageKey():
		return nil, 0, &ImageError{meta.Image}
	}
	// The snapshot streams from the store into the Guest's pages.
	src := &errReader{r: rd}
	sess, err := f.restore(ctx, owner, bufio.NewReaderSize(src, sessionstore.ReadMemory))
	if src.err != nil && !errors.Is(src.err, io.EOF) {
		if sess != nil {
			sess.Close(context.Background())
		}
		if errors.Is(src.err, sessionstore.ErrTooLarge) {
			return nil, 0, f.unrestorable(id, meta.Generation, src.err)
		}
		return nil, 0, &StoreError{src.err}
	}
	if errors.Is(err, spine.ErrSnapshot) || errors.Is(err, spine.ErrSnapshotMismatch) || errors.Is(err, spine.ErrSnapshotTooLarge) {
		return nil, 0, f.unrestorable(id, meta.Generation, err)
	}
	return sess, meta.Generation, err
}

// claim returns the generation after which a new session under id for
// owner is written: 0 when the store holds none, or the tombstone's when
// owner deleted it (the new line continues the old, so that a stale
// replica cannot bring the deleted one back). An id another owner holds
// is ErrTaken; a live session of owner's is sessionstore.ErrConflict: it
// was written since the caller looked, and is to be loaded.
func (f *Fleet) claim(ctx context.Context, id, owner string) (uint64, error) {
	meta, err := f.opts.Store.Head(ctx, id)
	switch {
	case errors.Is(err, sessionstore.ErrNotFound):
		return 0, nil
	case err != nil:
		return 0, &StoreError{err}
	case !meta.OwnedBy(owner):
		return 0, ErrTaken
	case !meta.Deleted:
		return 0, fmt.Errorf("%w: %s was written meanwhile", sessionstore.ErrConflict, id)
	}
	return meta.Generation, nil
}

// after returns the generation a session replacing id's for owner follows:
// the newest, a tombstone's included; 0 for none. ErrTaken when another
// owner holds id.
func (f *Fleet) after(ctx context.Context, id, owner string) (uint64, error) {
	meta, err := f.opts.Store.Head(ctx, id)
	switch {
	case errors.Is(err, sessionstore.ErrNotFound):
		return 0, nil
	case err != nil:
		return 0, &StoreError{err}
	case !meta.OwnedBy(owner):
		return 0, ErrTaken
	}
	return meta.Generation, nil
}

// Load makes the session id names for owner, which the Fleet does not
// hold, from the store, and returns it in use until Release (or the one
// another operation loaded meanwhile). ErrNoSession without a store, or
// when the store holds no session of owner's under id. It restores a
// snapshot: a front door that bounds the work in flight counts it as such.
func (f *Fleet) Load(ctx context.Context, id, owner string) (*Session, error) {
	if f.opts.Store == nil {
		return nil, ErrNoSession
	}
	sess, gen, err := f.fetch(ctx, id, owner)
	if err != nil {
		return nil, err
	}
	f.opts.OnStore("load")
	e := f.newSession(id, owner, sess)
	e.gen = gen
	e.Unlock()
	held, err := f.addOrGet(e)
	if held != e {
		sess.Close(context.Background()) // loaded by another operation meanwhile
	}
	return held, err
}

// Attach returns the session id names for owner, in use until Release,
// made when there is none: loaded from the store by its first Run, or a
// new session when the store holds none of owner's under id (an MCP
// session id, which a client is given before its first call). Without a
// store the session stays until Delete: its first Run makes a new live
// session, and so does a Run after its live one could no longer run or
// was put aside (Lost says why). client names the client it counts among
// for Options.Places and PlacesOf ("" for a client of its own); each
// Attach marks the session used. ErrNoSession when another owner holds id.
func (f *Fleet) Attach(id, owner, client string) (*Session, error) {
	if err := CheckID(id); err != nil {
		return nil, err
	}
	e := f.newSession(id, owner, nil)
	e.create, e.keep, e.client = true, f.opts.Store == nil, client
	e.Unlock()
	held, err := f.addOrGet(e)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.uses++
	held.used = f.uses
	f.mu.Unlock()
	return held, nil
}

// replaceHeld ends the session the Fleet holds under e's id for e's owner,
// which a restore under that id replaces.
func (f *Fleet) replaceHeld(e *Session) {
	old, err := f.Get(e.id, e.owner)
	if err != nil {
		return
	}
	defer f.Release(old)
	f.Forget(old)
}

// settle waits for a write after answering (WriteAnswer) of e to end; the
// caller holds e's lock.
func (e *Session) settle() {
	if e.pending != nil {
		<-e.pending
		e.pending = nil
	}
}

// refresh makes e's live state the store's newest generation, if e has
// none live, another replica wrote a newer one, or e's own was left behind
// (stale, or a live session that can no longer run); the caller holds e's
// lock.
func (f *Fleet) refresh(ctx context.Context, e *Session) error {
	if f.opts.Store == nil {
		return f.refreshLocal(ctx, e)
	}
	e.settle()
	if e.s != nil && e.s.Err() != nil {
		e.stale = true
	}
	if e.s != nil && !e.stale {
		if f.opts.Write == WriteHibernate {
			return nil // this replica's copy is the newest: sticky routing
		}
		newer, err := f.opts.Store.Newer(ctx, e.id, e.gen)
		if err != nil {
			return &StoreError{err}
		}
		if !newer {
			return nil
		}
	}
	if e.s == nil {
		if err := f.place(e); err != nil {
			return err
		}
		defer f.unplaceIdle(e)
	}
	sess, gen, dirty, err := f.load(ctx, e)
	if errors.Is(err, ErrNoSession) {
		f.Forget(e)
		return err
	}
	if err != nil {
		return err
	}
	if err := f.install(e, sess, gen, dirty); err != nil {
		return err
	}
	f.opts.OnStore("refresh")
	return nil
}

// refreshLocal is refresh without a store: a session Attach keeps whose
// live session can no longer run loses it (Lost says why), and one without
// a live session gets a new one.
func (f *Fleet) refreshLocal(ctx context.Context, e *Session) error {
	if e.keep && e.s != nil && e.s.Err() != nil {
		e.lost = errors.Join(e.broke, e.s.Err())
		e.broke = nil
		if old, _ := f.swap(e, nil); old != nil {
			old.Close(context.Background())
		}
	}
	if e.s != nil {
		return nil
	}
	if !e.create {
		return ErrNoSession
	}
	if err := f.place(e); err != nil {
		return err
	}
	defer f.unplaceIdle(e)
	sess, err := f.open(ctx, e.owner)
	if err != nil {
		return err
	}
	if _, ok := f.swap(e, sess); !ok {
		sess.Close(context.Background())
		return ErrNoSession
	}
	return nil
}

// install makes sess e's session at generation gen (dirty: the store lacks
// its state), closing the one it replaces; ErrNoSession, sess closed, when e
// has left the table meanwhile.
func (f *Fleet) install(e *Session, sess *spine.Session, gen uint64, dirty bool) error {
	old, ok := f.swap(e, sess)
	if !ok {
		sess.Close(context.Background())
		return ErrNoSession
	}
	if old != nil {
		old.Close(context.Background())
	}
	e.gen, e.stale, e.dirty = gen, false, dirty
	return nil
}

// load returns e's newest stored generation, restored; for a session
// Attach made, a new one when the store holds none of its owner's under
// its id, with the generation it follows.
func (f *Fleet) load(ctx context.Context, e *Session) (s *spine.Session, gen uint64, dirty bool, err error) {
	for range 3 {
		s, gen, err = f.fetch(ctx, e.id, e.owner)
		if !errors.Is(err, ErrNoSession) || !e.create {
			return s, gen, false, err
		}
		gen, err = f.claim(ctx, e.id, e.owner)
		if errors.Is(err, sessionstore.ErrConflict) {
			continue // written since it was looked for: load it
		}
		if err != nil {
			return nil, 0, false, err
		}
		s, err = f.open(ctx, e.owner)
		return s, gen, false, err
	}
	return nil, 0, false, &StoreError{fmt.Errorf("%w: %s kept changing while it was loaded", sessionstore.ErrConflict, e.id)}
}

// Run runs req in e: the store's newest state first (loaded when another
// replica wrote it), then the run, then its write (Options.Write). The
// caller holds e's lock. A run Cut stops returns ErrCut and leaves e as it
// was before the run.
func (f *Fleet) Run(ctx context.Context, e *Session, req spine.Request) (*spine.Output, error) {
	return f.run(ctx, e, func(ctx context.Context, s *spine.Session) (*spine.Output, error) { return s.Run(ctx, req) })
}

// run is Run's work, with run the run in e's live session, refreshed.
func (f *Fleet) run(ctx context.Context, e *Session, run func(context.Context, *spine.Session) (*spine.Output, error)) (*spine.Output, error) {
	if f.isCut() {
		return nil, ErrCut
	}
	if err := f.refresh(ctx, e); err != nil {
		return nil, err
	}
	// A session whose state the store lacks keeps a snapshot of it while
	// the run goes on, in a file: a run Cut stops is undone to it.
	dirty := e.dirty
	var before *os.File
	if f.opts.Store != nil && dirty {
		before = f.keep(ctx, e) // nil (files open, no room): what the store has
		if before != nil {
			defer before.Close()
		}
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(f.cut, cancel)()
	out, err := run(runCtx, e.s)
	if err != nil && e.keep && e.s.Err() != nil {
		e.broke = err // for Lost, when the next Run replaces it
	}
	if err != nil && f.isCut() && !errors.As(err, new(*spine.PythonError)) {
		f.undo(ctx, e, dirty, before)
		return out, ErrCut
	}
	return out, f.commit(ctx, e, err)
}

// commit stores what a run of e left (runErr is the run's error), per
// Options.Write, and returns the run's error as its answer should say it;
// the caller holds e's lock.
func (f *Fleet) commit(ctx context.Context, e *Session, runErr error) error {
	if f.opts.Store == nil {
		return runErr
	}
	if runErr != nil && !errors.As(runErr, new(*spine.PythonError)) {
		if e.s.Err() != nil {
			e.stale = true // lost: the store holds the state before this run
		}
		return runErr
	}
	e.dirty = true
	if f.opts.Write == WriteHibernate {
		return runErr
	}
	ctx, cancel := f.storeCtx(ctx)
	if f.opts.Write == WriteAnswer {
		// The snapshot streams to the store after the answer; e's next
		// operation waits for it (settle), so it stores this run's state.
		done := make(chan struct{})
		e.pending = done
		go func() {
			defer close(done)
			defer cancel()
			if err := f.put(ctx, e, f.live(ctx, e)); err != nil {
				f.opts.Logger.Error("writing a session after answering failed", "session", e.id, "error", err)
			}
		}()
		return runErr
	}
	defer cancel()
	if err := f.put(ctx, e, f.live(ctx, e)); err != nil {
		return err
	}
	return runErr
}

// Snapshot writes e's snapshot to w, the store's newest state first; the
// caller holds e's lock.
func (f *Fleet) Snapshot(ctx context.Context, e *Session, w io.Writer) (int64, error) {
	if err := f.refresh(ctx, e); err != nil {
		return 0, err
	}
	return e.s.SnapshotTo(ctx, w)
}

// Fresh gives e a new, empty session in place of its state, as the
// generation after the store's newest, and forgets what Lost would say;
// the caller holds e's lock.
func (f *Fleet) Fresh(ctx context.Context, e *Session) error {
	e.settle()
	e.lost, e.broke = nil, nil
	if e.s == nil {
		if err := f.place(e); err != nil {
			return err
		}
		defer f.unplaceIdle(e)
	}
	var gen uint64
	if f.opts.Store != nil {
		var err error
		if gen, err = f.after(ctx, e.id, e.owner); err != nil {
			return err
		}
	}
	sess, err := f.open(ctx, e.owner)
	if err != nil {
		return err
	}
	return f.install(e, sess, gen, true)
}

// live is the snapshot of e's session, streamed from its Guest's pages.
func (f *Fleet) live(ctx context.Context, e *Session) func(io.Writer) error {
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

// StreamMemory is the most memory a Fleet takes, beyond the Guest's own,
// to write a session to its store or load one from it, whatever the
// session's size: the snapshot's stream (spine.SnapshotStreamMemory), the
// store's upload or download buffers (sessionstore.WriteMemory), and a
// buffer. docs/sessions.md gives the figure measured for a 200 MB session.
const StreamMemory = spine.SnapshotStreamMemory + sessionstore.WriteMemory + snapshotBuffer

// put writes the snapshot write writes as e's next generation, at most
// Options.MaxSnapshot bytes (a larger one could never be loaded) and what
// its owner's StoreBytes leaves. On a conflict e is stale: its next
// operation loads the store's. A snapshot that could not be made, or is
// over the cap, is a *NotStoredError: under WriteRun the run is undone;
// under WriteAnswer e stays live, ahead of the store, as when the store
// fails.
func (f *Fleet) put(ctx context.Context, e *Session, write func(io.Writer) error) error {
	meta := sessionstore.Meta{Generation: e.gen + 1, Owner: e.owner, Image: f.runner.ImageKey()}
	var made error
	keep := func(w io.Writer) error {
		made = write(w)
		return made
	}
	var err error
	if share := f.share(e.owner); share.StoreBytes > 0 {
		err = f.opts.Store.PutOwned(ctx, e.id, meta, f.opts.MaxSnapshot, share.StoreBytes, keep)
		var full *sessionstore.OwnerFullError
		if errors.As(err, &full) {
			err = fmt.Errorf("token %q is at its store_bytes: %w", share.Name, err)
		}
	} else {
		err = f.opts.Store.Put(ctx, e.id, meta, f.opts.MaxSnapshot, keep)
	}
	switch {
	case errors.Is(err, sessionstore.ErrConflict):
		e.stale = true
		f.opts.OnStore("conflict")
		return &ConflictError{err}
	case made != nil || errors.Is(err, sessionstore.ErrTooLarge):
		if errors.Is(err, sessionstore.ErrTooLarge) {
			made = err
		}
		if f.opts.Write != WriteAnswer {
			e.stale = true
		}
		return &NotStoredError{made}
	case err != nil:
		if f.opts.Write == WriteRun {
			e.stale = true // the answer says the run failed: undo it
		}
		return &StoreError{err}
	}
	e.gen, e.dirty = meta.Generation, false
	f.opts.OnStore("write")
	return nil
}

// persist writes e if the store lacks its state; the caller holds e's
// lock.
func (f *Fleet) persist(ctx context.Context, e *Session) error {
	e.settle()
	if e.s == nil || e.stale || !e.dirty || e.s.Err() != nil {
		return nil
	}
	return f.put(ctx, e, f.live(ctx, e))
}

// PutAside takes e's live session out of this process: written to the
// store if the store lacks its state (it hibernates), then closed; e's
// next Run loads it. Without a store it is closed, its state lost (a
// session Attach made then gets a new one on its next Run). The caller
// holds e's lock; the error is the write's, and then the state is lost.
func (f *Fleet) PutAside(ctx context.Context, e *Session) error {
	var err error
	if f.opts.Store != nil {
		err = f.persist(ctx, e)
	}
	if old, ok := f.swap(e, nil); ok && old != nil {
		old.Close(context.Background())
	} else if !ok && e.s != nil {
		e.s.Close(context.Background())
		e.s = nil
	}
	e.stale, e.broke = false, nil
	f.mu.Lock()
	if e.busy == 0 && !e.keep && f.byID[e.id] == e {
		f.remove(e)
	}
	f.mu.Unlock()
	return err
}

// Delete ends the session id names for owner: the live one, if the Fleet
// holds it (a run in flight in it stops), and with a store its line there,
// whichever replica held it (a tombstone). ErrNoSession when neither holds
// a session of owner's under id: with a store, a live copy of a session
// that was written and is no longer in the store (another replica deleted
// it) is not one.
func (f *Fleet) Delete(ctx context.Context, id, owner string) error {
	e, err := f.Get(id, owner)
	unstored := false // e lives here only: never written to the store
	if err == nil {
		defer f.Release(e)
		if !f.forget(e) { // deleted by an operation before this one
			e = nil
		} else if e.s != nil {
			// Close stops a run in flight and waits for it to return, which
			// it does at once: not ctx, which could leave it half-closed.
			e.s.Close(context.Background())
			// Its run has returned: the lock is free in a moment.
			if e.Lock(ctx) == nil {
				unstored = e.gen == 0 && e.dirty
				e.Unlock()
			}
		}
	}
	switch {
	case f.opts.Store != nil && (e != nil || errors.Is(err, ErrNoSession)):
		if err := f.deleteStored(ctx, id, owner); err != nil && !(unstored && errors.Is(err, ErrNoSession)) {
			return err
		}
		return nil
	case e == nil && err == nil:
		return ErrNoSession
	}
	return err
}

// deleteStored deletes id from the store for owner: ErrNoSession when the
// store holds no session of the owner's under id.
func (f *Fleet) deleteStored(ctx context.Context, id, owner string) error {
	if CheckID(id) != nil {
		return ErrNoSession
	}
	meta, err := f.opts.Store.Head(ctx, id)
	switch {
	case errors.Is(err, sessionstore.ErrNotFound):
		return ErrNoSession
	case err != nil:
		return &StoreError{err}
	case meta.Deleted || !meta.OwnedBy(owner):
		return ErrNoSession
	}
	if err := f.opts.Store.Delete(ctx, id); err != nil {
		return &StoreError{err}
	}
	return nil
}

// Hibernated writes a session of the Fleet's that its Runner hibernated
// to the store, if the store lacks its state: set the Runner's
// SessionOptions.OnHibernate to it. A session an operation holds now is
// left for that operation's own write, or for Close.
func (f *Fleet) Hibernated(sess *spine.Session, snapshot io.Reader) {
	if f.opts.Store == nil {
		return
	}
	e := f.bySpineSession(sess)
	if e == nil || !e.TryLock() {
		return
	}
	defer e.Unlock()
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
	if e.stale || !e.dirty {
		return
	}
	ctx, cancel := f.storeCtx(context.Background())
	defer cancel()
	err := f.put(ctx, e, func(w io.Writer) error {
		_, err := io.Copy(w, snapshot)
		return err
	})
	if err != nil {
		f.opts.Logger.Error("writing a hibernated session to the store failed", "session", e.id, "error", err)
	}
}

// Close ends every session of the Fleet (a run in flight in one stops) and
// refuses every operation from then on (spine.ErrClosed). With a store,
// each session whose state the store lacks is written first (a drain loses
// no session), and Close returns the first write that failed, or ctx's
// error when an operation in flight held a session past it. Without one
// the sessions are lost, and Close logs how many at WARN. Call it once the
// front door has answered every request (after Cut), before closing the
// Runner.
func (f *Fleet) Close(ctx context.Context) error {
	var first error
	lost := 0
	for _, e := range f.closeAll() {
		if f.opts.Store != nil {
			err := e.Lock(ctx)
			if err == nil {
				err = f.persist(ctx, e)
				e.Unlock()
			}
			if err != nil {
				f.opts.Logger.Error("writing a session to the store at close failed", "session", e.id, "error", err)
				if first == nil {
					first = fmt.Errorf("session %s: %w", e.id, err)
				}
			}
		} else if e.s != nil && e.s.Err() == nil {
			lost++
		}
		if e.s != nil {
			if err := e.s.Close(ctx); err != nil && first == nil {
				first = err
			}
		}
	}
	if lost > 0 {
		f.opts.Logger.Warn("sessions lost at stop: there is no session store or directory to keep them", "sessions", lost)
	}
	return first
}
