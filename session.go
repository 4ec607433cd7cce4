package spine

import (
	"bytes"
	"container/list"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"time"

	"github.com/spine-run/spine/internal/engine"
)

// A Session is a Guest kept from run to run (docs/sessions.md): the globals,
// imported modules, functions and classes one run defines are there in the
// next, as in a notebook; inputs and result are each run's own. Its Guest
// never goes back to the pool and no other session or run sees it.
//
// Runs of one session are serialised: a Run waits for the one before it to
// end (or for its own ctx). Every limit of a run applies to each run of a
// session; the session's memory as a whole is capped by
// SessionOptions.MemoryLimit. A run that does not end cleanly — stopped by its
// time limit or ctx, a trap, os._exit — leaves its Guest in the middle of an
// instruction, so the session is lost: that Run returns the run's error and
// later ones ErrSessionLost.
//
// An idle session may be hibernated (SessionOptions): its state is kept as a
// snapshot and its Guest freed; its next Run wakes it, transparently.
type Session struct {
	r       *Runner
	tenant  *Tenant            // whose share it counts in; nil: the Runner's own
	id      string             // random: names its hibernation file
	turn    chan struct{}      // holds a token while no operation has the session
	closing context.Context    // done once Close begins: its run stops
	stop    context.CancelFunc // ends closing

	// Owned by whoever holds the turn.
	inst   *engine.Instance      // the live Guest; nil while hibernated, lost or closed
	frozen *chunks               // the snapshot, while hibernated in memory
	file   string                // the snapshot's file, while hibernated in SessionOptions.Dir
	size   int64                 // the bytes of that file
	lost   error                 // why the Guest is gone, once a run broke it
	runs   int                   // runs it made in this Runner (a Record's RecordSession.Runs)
	ended  error                 // ErrSessionClosed, with why, once closed
	broken atomic.Pointer[error] // lost or ended, for Err, which holds no turn

	// Guarded by the Runner's sessions.mu.
	used time.Time     // when its last operation ended
	live *list.Element // its place among the live sessions, least recently used first
}

var (
	// ErrSessionClosed is the error of an operation on a closed session: by
	// Close, by Runner.Close, or after SessionOptions.TTL without use.
	ErrSessionClosed = errors.New("spine: session closed")

	// ErrSessionLost is the error of a Run on a session whose Guest an earlier
	// run left broken (a time limit, a stopped ctx, a trap, os._exit).
	ErrSessionLost = errors.New("spine: session lost")

	// ErrTooManySessions is NewSession or Restore past SessionOptions.Max, or
	// a session waking when every live session is running.
	ErrTooManySessions = errors.New("spine: too many sessions")

	// ErrSessionState is Snapshot of a session whose state a snapshot cannot
	// carry: one holding files open.
	ErrSessionState = errors.New("spine: the session's state cannot be snapshotted")
)

// NewSession starts a session from the Runner's clean image.
func (r *Runner) NewSession(ctx context.Context) (*Session, error) {
	return r.newSession(ctx, nil)
}

// newSession is NewSession, in tenant's share (nil: none).
func (r *Runner) newSession(ctx context.Context, tenant *Tenant) (*Session, error) {
	if err := r.begin(); err != nil {
		return nil, err
	}
	defer r.runs.Done()
	return r.sessions.open(r, tenant, func() (*engine.Instance, error) {
		return r.engine.NewSession(ctx, r.opts.Sessions.MemoryLimit)
	})
}

// Restore starts a session from a snapshot, in this process or another, on
// this machine or another: the Runner needs the same Guest artifact and tool
// list as the one that took it. A blob that is not a sound snapshot fails
// with ErrSnapshot, one of another artifact or tool list with
// ErrSnapshotMismatch.
func (r *Runner) Restore(ctx context.Context, snapshot []byte) (*Session, error) {
	return r.restore(ctx, bytes.NewReader(snapshot), nil)
}

// RestoreFrom is Restore of the snapshot rd reads, a page at a time: it
// takes no more memory than the session's Guest and snapshotStreamMemory
// (docs/sessions.md), whatever the snapshot's size. An error of rd's is
// returned within ErrSnapshot (errors.Is and errors.As find it).
func (r *Runner) RestoreFrom(ctx context.Context, rd io.Reader) (*Session, error) {
	return r.restore(ctx, rd, nil)
}

// restore is RestoreFrom, in tenant's share (nil: none).
func (r *Runner) restore(ctx context.Context, rd io.Reader, tenant *Tenant) (*Session, error) {
	if err := r.begin(); err != nil {
		return nil, err
	}
	defer r.runs.Done()
	stream, err := openRestore(rd, r.identity, r.engine, r.opts.Sessions.MemoryLimit)
	if err != nil {
		return nil, err
	}
	defer stream.close()
	return r.sessions.open(r, tenant, func() (*engine.Instance, error) {
		return stream.restore(ctx, r.engine, r.opts.Sessions.MemoryLimit)
	})
}

// take waits for the session's turn, or for ctx.
func (s *Session) take(ctx context.Context) error {
	select {
	case <-s.turn:
		return nil
	default:
	}
	select {
	case <-s.turn:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("spine: waiting for the session's turn: %w", ctx.Err())
	}
}

// give ends an operation on the session, marking it used.
func (s *Session) give() {
	s.r.sessions.used(s)
	s.turn <- struct{}{}
}

// Run runs one program in the session. It waits for the session's previous
// run to end. Errors are those of Runner.Run, plus ErrSessionClosed and
// ErrSessionLost.
func (s *Session) Run(ctx context.Context, req Request) (*Output, error) {
	r := s.r
	if err := r.begin(); err != nil {
		return nil, err
	}
	defer r.runs.Done()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.closing, cancel)() // Close stops the run in flight
	if err := s.take(ctx); err != nil {
		return nil, s.stopped(err)
	}
	defer s.give()
	if err := s.usable(); err != nil {
		return nil, err
	}
	return r.run(ctx, req, s)
}

// stopped names why an operation stopped waiting: the session or Runner
// closing, or its own ctx.
func (s *Session) stopped(err error) error {
	switch {
	case s.r.closing.Err() != nil:
		return ErrClosed
	case s.closing.Err() != nil:
		return ErrSessionClosed
	}
	return err
}

// usable reports why the session (whose turn the caller holds) cannot run.
// It finishes a Close whose ctx ended before it had the turn.
func (s *Session) usable() error {
	if s.ended == nil && s.closing.Err() != nil {
		why := ErrSessionClosed
		if s.r.closing.Err() != nil {
			why = ErrClosed
		}
		s.end(why)
	}
	if s.ended != nil {
		return s.ended
	}
	return s.lost
}

// guest returns the session's live Guest, waking it from hibernation.
func (s *Session) guest(ctx context.Context) (*engine.Instance, error) {
	if s.inst != nil {
		return s.inst, nil
	}
	rd, done, err := s.thawed()
	if err != nil && s.file != "" && !errors.Is(err, os.ErrNotExist) {
		return nil, err // a passing failure to open the file (EMFILE, EIO): try again later
	}
	if err == nil {
		var inst *engine.Instance
		inst, err = s.wake(ctx, rd)
		done()
		if err == nil || !errors.Is(err, ErrSnapshot) && !errors.Is(err, ErrSnapshotMismatch) {
			return inst, err // woken, or not now (no live place, no memory)
		}
	}
	// The snapshot is gone or damaged (a file in Dir removed or changed
	// behind the Runner's back): the session cannot come back.
	s.forgetSnapshot()
	s.fail(fmt.Errorf("%w: its hibernated state could not be read: %v", ErrSessionLost, err))
	return nil, s.lost
}

// wake restores the hibernated session's snapshot, which rd reads, into a
// new live Guest.
func (s *Session) wake(ctx context.Context, rd io.Reader) (*engine.Instance, error) {
	stream, err := openRestore(rd, s.r.identity, s.r.engine, s.r.opts.Sessions.MemoryLimit)
	if err != nil {
		return nil, err
	}
	defer stream.close()
	err = s.r.sessions.admit(s, func() (*engine.Instance, error) {
		return stream.restore(ctx, s.r.engine, s.r.opts.Sessions.MemoryLimit)
	})
	if err != nil {
		return nil, err
	}
	s.forgetSnapshot()
	return s.inst, nil
}

// runEnded is called by run when a run of the session has ended; failed says
// the Guest broke (a call into it did not return).
func (s *Session) runEnded(failed bool, cause error) {
	s.runs++
	if !failed {
		return
	}
	s.inst.Close()
	s.inst = nil
	s.r.sessions.leaveLive(s)
	if cause == nil {
		cause = errors.New("the Guest failed")
	}
	s.fail(fmt.Errorf("%w: a run did not end cleanly (%v)", ErrSessionLost, cause))
}

// Close ends the session: a run in progress stops, and the session's Guest
// and snapshot are freed. Later operations fail with ErrSessionClosed. It is
// safe to call more than once.
func (s *Session) Close(ctx context.Context) error {
	s.stop() // from now on, whoever takes the turn next ends the session (usable)
	select {
	case <-s.turn:
	default:
		select {
		case <-s.turn:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	defer func() { s.turn <- struct{}{} }()
	s.end(ErrSessionClosed)
	return nil
}

// end frees everything the session holds (its turn held) and forgets it.
func (s *Session) end(why error) {
	if s.ended != nil {
		return
	}
	s.ended = why
	s.broken.Store(&why)
	s.stop()
	if s.inst != nil {
		s.inst.Close()
		s.inst = nil
		s.r.sessions.leaveLive(s)
	}
	s.forgetSnapshot()
	s.r.sessions.forget(s)
}

// fail records that the session is lost, and why.
func (s *Session) fail(why error) {
	s.lost = why
	s.broken.Store(&why)
}

// Err is nil while the session can run, and otherwise why not: an error
// matching ErrSessionLost once a run left its Guest broken (the Run that did
// returns that run's own error, a time-out say), or ErrSessionClosed (or
// ErrClosed) once it is closed. It does not wait for a run in progress.
func (s *Session) Err() error {
	if why := s.broken.Load(); why != nil {
		return *why
	}
	return nil
}

// Done is closed once the session is closed: by Close, by Runner.Close, or by
// the Runner after SessionOptions.TTL without use. A service that keeps
// sessions by id can drop the ones whose Done is closed.
func (s *Session) Done() <-chan struct{} { return s.closing.Done() }
