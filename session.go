package spine

import (
	"bytes"
	"container/list"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
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
	id      string             // random: names its hibernation file
	turn    chan struct{}      // holds a token while no operation has the session
	closing context.Context    // done once Close begins: its run stops
	stop    context.CancelFunc // ends closing

	// Owned by whoever holds the turn.
	inst   *engine.Instance      // the live Guest; nil while hibernated, lost or closed
	frozen []byte                // the snapshot, while hibernated in memory
	file   string                // the snapshot's file, while hibernated in SessionOptions.Dir
	lost   error                 // why the Guest is gone, once a run broke it
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

// sessions is a Runner's table of sessions.
type sessions struct {
	mu     sync.Mutex
	all    map[*Session]struct{}
	frozen int64      // bytes of the snapshots hibernated sessions keep in memory
	live   *list.List // sessions with a live Guest, least recently used first
	now    func() time.Time
	wg     sync.WaitGroup // the sweeper
	awake  chan struct{}  // closed when the sweeper should stop
}

// hold counts n more bytes of snapshots kept in memory (n < 0: fewer),
// unless that would take them past limit (when n > 0): then it reports false.
func (t *sessions) hold(n int, limit uint64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n > 0 && uint64(t.frozen)+uint64(n) > limit {
		return false
	}
	t.frozen += int64(n)
	return true
}

func newSessions() *sessions {
	return &sessions{all: map[*Session]struct{}{}, live: list.New(), now: time.Now, awake: make(chan struct{})}
}

// NewSession starts a session from the Runner's clean image.
func (r *Runner) NewSession(ctx context.Context) (*Session, error) {
	if err := r.begin(); err != nil {
		return nil, err
	}
	defer r.runs.Done()
	s, err := r.addSession()
	if err != nil {
		return nil, err
	}
	err = r.admit(s, func() (*engine.Instance, error) {
		return r.engine.NewSession(ctx, r.opts.Sessions.MemoryLimit)
	})
	if err != nil {
		r.dropSession(s)
		return nil, r.sessionError(err)
	}
	s.give()
	return s, nil
}

// Restore starts a session from a snapshot, in this process or another, on
// this machine or another: the Runner needs the same Guest artifact and tool
// list as the one that took it. A blob that is not a sound snapshot fails
// with ErrSnapshot, one of another artifact or tool list with
// ErrSnapshotMismatch.
func (r *Runner) Restore(ctx context.Context, snapshot []byte) (*Session, error) {
	if err := r.begin(); err != nil {
		return nil, err
	}
	defer r.runs.Done()
	st, err := decodeSnapshot(r.identity, snapshot, r.opts.Sessions.MemoryLimit)
	if err != nil {
		return nil, err
	}
	if err := r.engine.Check(st, r.opts.Sessions.MemoryLimit); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSnapshot, err)
	}
	s, err := r.addSession()
	if err != nil {
		return nil, err
	}
	err = r.admit(s, func() (*engine.Instance, error) {
		return r.engine.Restore(ctx, st, r.opts.Sessions.MemoryLimit)
	})
	if err != nil {
		r.dropSession(s)
		return nil, r.sessionError(err)
	}
	s.give()
	return s, nil
}

// addSession makes a session, counted against SessionOptions.Max, holding
// its turn and without a Guest.
func (r *Runner) addSession() (*Session, error) {
	id := make([]byte, 16)
	rand.Read(id)
	s := &Session{r: r, id: hex.EncodeToString(id), turn: make(chan struct{}, 1)}
	s.closing, s.stop = context.WithCancel(r.closing) // made holding its turn: the token is not in turn
	t := r.sessions
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.all) >= r.opts.Sessions.Max {
		s.stop()
		return nil, fmt.Errorf("%w: the Runner holds %d, its limit", ErrTooManySessions, len(t.all))
	}
	t.all[s] = struct{}{}
	s.used = t.now()
	return s, nil
}

// dropSession forgets s, which holds its turn and has no Guest, for good.
func (r *Runner) dropSession(s *Session) {
	s.stop()
	t := r.sessions
	t.mu.Lock()
	delete(t.all, s)
	t.mu.Unlock()
}

// sessionError is how a failure to make a session's Guest reads.
func (r *Runner) sessionError(err error) error {
	if r.closing.Err() != nil {
		return ErrClosed
	}
	if errors.Is(err, ErrTooManySessions) || errors.Is(err, ErrGuest) || errors.Is(err, ErrArtifact) {
		return err
	}
	return fmt.Errorf("%w: %v", ErrGuest, err)
}

// admit gives s (holding its turn, without a Guest) the Guest start returns,
// as one of at most SessionOptions.MaxLive live sessions: past the cap, the
// least recently used session that is not running is hibernated first.
func (r *Runner) admit(s *Session, start func() (*engine.Instance, error)) error {
	t := r.sessions
	for {
		t.mu.Lock()
		if t.live.Len() < r.opts.Sessions.MaxLive {
			s.live = t.live.PushBack(s) // the place is taken before the Guest is made
			t.mu.Unlock()
			break
		}
		var idle []*Session
		for e := t.live.Front(); e != nil; e = e.Next() {
			idle = append(idle, e.Value.(*Session))
		}
		t.mu.Unlock()
		freed := false
		for _, other := range idle {
			if other.hibernateIfIdle() {
				freed = true
				break
			}
		}
		// A session holding files open cannot be hibernated; rather than
		// let such sessions hold every live place for good, the one used
		// least recently is lost.
		for i := 0; !freed && i < len(idle); i++ {
			freed = idle[i].evictIfIdle()
		}
		if !freed {
			return fmt.Errorf("%w: none of the %d live sessions can make room: each is running, or its snapshot would take hibernated sessions past HibernatedMemory", ErrTooManySessions, r.opts.Sessions.MaxLive)
		}
	}
	inst, err := start()
	if err != nil {
		r.leaveLive(s)
		return err
	}
	s.inst = inst
	return nil
}

// leaveLive takes s off the live list.
func (r *Runner) leaveLive(s *Session) {
	t := r.sessions
	t.mu.Lock()
	if s.live != nil {
		t.live.Remove(s.live)
		s.live = nil
	}
	t.mu.Unlock()
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
	t := s.r.sessions
	t.mu.Lock()
	s.used = t.now()
	if s.live != nil {
		t.live.MoveToBack(s.live)
	}
	t.mu.Unlock()
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
	blob, err := s.thawed()
	if err != nil && s.file != "" && !errors.Is(err, os.ErrNotExist) {
		return nil, err // a passing failure to read the file (EMFILE, EIO): try again later
	}
	if err == nil {
		var st *engine.State
		if st, err = decodeSnapshot(s.r.identity, blob, s.r.opts.Sessions.MemoryLimit); err == nil {
			return s.wake(ctx, st)
		}
	}
	// The snapshot is gone or damaged (a file in Dir removed or changed
	// behind the Runner's back): the session cannot come back.
	s.forgetSnapshot()
	s.fail(fmt.Errorf("%w: its hibernated state could not be read: %v", ErrSessionLost, err))
	return nil, s.lost
}

// wake restores the hibernated session's state st into a new live Guest.
func (s *Session) wake(ctx context.Context, st *engine.State) (*engine.Instance, error) {
	err := s.r.admit(s, func() (*engine.Instance, error) {
		return s.r.engine.Restore(ctx, st, s.r.opts.Sessions.MemoryLimit)
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
	if !failed {
		return
	}
	s.inst.Close()
	s.inst = nil
	s.r.leaveLive(s)
	if cause == nil {
		cause = errors.New("the Guest failed")
	}
	s.fail(fmt.Errorf("%w: a run did not end cleanly (%v)", ErrSessionLost, cause))
}

// Snapshot returns the session's state as a self-describing, versioned,
// checksummed blob (docs/sessions.md) that Runner.Restore takes, here or on
// another machine with the same Guest artifact and tool list. It waits for a
// run in progress to end. A session holding files open cannot be
// snapshotted (ErrSessionState).
func (s *Session) Snapshot(ctx context.Context) ([]byte, error) {
	if err := s.r.begin(); err != nil {
		return nil, err
	}
	defer s.r.runs.Done()
	if err := s.take(ctx); err != nil {
		return nil, s.stopped(err)
	}
	defer s.give()
	if err := s.usable(); err != nil {
		return nil, err
	}
	if s.inst == nil {
		if s.frozen != nil {
			return bytes.Clone(s.frozen), nil // the caller's to change
		}
		return s.thawed() // read from its file: the caller's already
	}
	return s.snapshot()
}

// snapshot encodes the live Guest's state.
func (s *Session) snapshot() ([]byte, error) {
	st, err := s.inst.State()
	if err != nil {
		if errors.Is(err, engine.ErrFilesOpen) {
			return nil, fmt.Errorf("%w: it holds %d files or directories open", ErrSessionState, s.inst.FilesOpen())
		}
		return nil, err
	}
	return encodeSnapshot(s.r.identity, st), nil
}

// Hibernate turns the session into its snapshot now, freeing its Guest; its
// next Run wakes it. The Runner does this by itself to sessions idle past
// SessionOptions.Idle, and to the least recently used one when more than
// SessionOptions.MaxLive would be live. It waits for a run in progress.
func (s *Session) Hibernate(ctx context.Context) error {
	if err := s.r.begin(); err != nil {
		return err
	}
	defer s.r.runs.Done()
	if err := s.take(ctx); err != nil {
		return s.stopped(err)
	}
	defer s.give()
	if err := s.usable(); err != nil {
		return err
	}
	return s.hibernate()
}

// hibernateIfIdle hibernates the session if no operation has it now, and
// reports whether its Guest was freed.
func (s *Session) hibernateIfIdle() bool {
	select {
	case <-s.turn:
	default:
		return false
	}
	defer func() { s.turn <- struct{}{} }() // not give: this is no use of the session
	return s.usable() == nil && s.inst != nil && s.hibernate() == nil
}

// evictIfIdle loses the session if no operation has it now and it holds a
// live Guest, and reports whether it did: room is needed among the live
// sessions, and this one cannot be hibernated (it holds files open).
func (s *Session) evictIfIdle() bool {
	select {
	case <-s.turn:
	default:
		return false
	}
	defer func() { s.turn <- struct{}{} }()
	if s.usable() != nil || s.inst == nil || s.inst.FilesOpen() == 0 {
		return false
	}
	s.inst.Close()
	s.inst = nil
	s.r.leaveLive(s)
	s.fail(fmt.Errorf("%w: it held files open, so it could not be hibernated when room was needed among the %d live sessions", ErrSessionLost, s.r.opts.Sessions.MaxLive))
	return true
}

// hibernate keeps the live Guest's snapshot and frees the Guest.
func (s *Session) hibernate() error {
	if s.inst == nil {
		return nil
	}
	blob, err := s.snapshot()
	if err != nil {
		return err
	}
	if dir := s.r.opts.Sessions.Dir; dir != "" {
		path := filepath.Join(dir, s.id+".snapshot")
		if err := writeFileAtomic(path, blob); err != nil {
			return fmt.Errorf("spine: hibernating a session: %w", err)
		}
		s.file = path
	} else {
		if !s.r.sessions.hold(len(blob), s.r.opts.Sessions.HibernatedMemory) {
			return fmt.Errorf("%w: hibernated sessions hold their limit of %d bytes of snapshots", ErrTooManySessions, s.r.opts.Sessions.HibernatedMemory)
		}
		s.frozen = blob
	}
	if f := s.r.opts.Sessions.OnHibernate; f != nil {
		f(s, blob)
	}
	s.inst.Close()
	s.inst = nil
	s.r.leaveLive(s)
	return nil
}

// thawed returns the hibernated session's snapshot.
func (s *Session) thawed() ([]byte, error) {
	if s.file != "" {
		blob, err := os.ReadFile(s.file)
		if err != nil {
			return nil, fmt.Errorf("spine: waking a session: %w", err)
		}
		return blob, nil
	}
	if s.frozen == nil {
		return nil, fmt.Errorf("%w: no Guest and no snapshot", ErrSessionLost)
	}
	return s.frozen, nil
}

// forgetSnapshot drops the hibernated snapshot once the Guest is live again.
func (s *Session) forgetSnapshot() {
	if s.file != "" {
		os.Remove(s.file)
		s.file = ""
	}
	if s.frozen != nil {
		s.r.sessions.hold(-len(s.frozen), 0)
		s.frozen = nil
	}
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
		s.r.leaveLive(s)
	}
	s.forgetSnapshot()
	t := s.r.sessions
	t.mu.Lock()
	delete(t.all, s)
	t.mu.Unlock()
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

// SessionStats counts a Runner's sessions.
type SessionStats struct {
	Sessions int // open sessions, live and hibernated
	Live     int // sessions with a live Guest
}

// SessionStats returns the Runner's session counts.
func (r *Runner) SessionStats() SessionStats {
	t := r.sessions
	t.mu.Lock()
	defer t.mu.Unlock()
	return SessionStats{Sessions: len(t.all), Live: t.live.Len()}
}

// sweep hibernates the sessions idle past SessionOptions.Idle and closes those
// idle past SessionOptions.TTL, as of now. Sessions in use are left for the
// next sweep.
func (r *Runner) sweep(now time.Time) {
	t := r.sessions
	t.mu.Lock()
	var expired, idle []*Session
	for s := range t.all {
		unused := now.Sub(s.used)
		switch {
		case r.opts.Sessions.TTL > 0 && unused >= r.opts.Sessions.TTL:
			expired = append(expired, s)
		case r.opts.Sessions.Idle > 0 && unused >= r.opts.Sessions.Idle && s.live != nil:
			idle = append(idle, s)
		}
	}
	t.mu.Unlock()
	for _, s := range expired {
		select {
		case <-s.turn:
			if s.unusedFor(now) >= r.opts.Sessions.TTL { // not used since it was chosen
				s.end(fmt.Errorf("%w: unused for %v, its time to live", ErrSessionClosed, r.opts.Sessions.TTL))
			}
			s.turn <- struct{}{}
		default:
		}
	}
	for _, s := range idle {
		if s.unusedFor(now) >= r.opts.Sessions.Idle {
			s.hibernateIfIdle()
		}
	}
}

// unusedFor is how long, as of now, the session has gone unused.
func (s *Session) unusedFor(now time.Time) time.Duration {
	t := s.r.sessions
	t.mu.Lock()
	defer t.mu.Unlock()
	return now.Sub(s.used)
}

// sweeper sweeps the sessions every so often until the Runner closes.
func (r *Runner) sweeper(every time.Duration) {
	defer r.sessions.wg.Done()
	ticker := time.NewTicker(every)
	defer ticker.Stop()
	for {
		select {
		case <-r.closing.Done():
			return
		case <-ticker.C:
			r.sweep(r.sessions.now())
		}
	}
}

// closeSessions ends every session; the Runner is closing and no operation is
// in flight.
func (r *Runner) closeSessions() {
	t := r.sessions
	t.wg.Wait()
	t.mu.Lock()
	all := make([]*Session, 0, len(t.all))
	for s := range t.all {
		all = append(all, s)
	}
	t.mu.Unlock()
	for _, s := range all {
		<-s.turn
		s.end(ErrClosed)
		s.turn <- struct{}{}
	}
}

// writeFileAtomic writes data to path through a temporary file renamed into
// place, readable by the owner only.
func writeFileAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".snapshot-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
