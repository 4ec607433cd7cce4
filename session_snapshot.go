package spine

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spine-run/spine/internal/engine"
)

// Snapshot returns the session's state as a self-describing, versioned,
// checksummed blob (docs/sessions.md) that Runner.Restore takes, here or on
// another machine with the same Guest artifact and tool list. It waits for a
// run in progress to end. A session holding files open cannot be
// snapshotted (ErrSessionState).
func (s *Session) Snapshot(ctx context.Context) ([]byte, error) {
	var c chunks
	if _, err := s.SnapshotTo(ctx, &c); err != nil {
		return nil, err
	}
	return c.bytes(), nil
}

// SnapshotTo writes the session's snapshot to w as Snapshot would return
// it, a page at a time: it takes no more memory than snapshotStreamMemory
// (docs/sessions.md), whatever the session's size. It returns the bytes
// written. A snapshot over SessionOptions.MaxSnapshot fails with
// ErrSnapshotTooLarge; on any error, what w got is not a snapshot.
func (s *Session) SnapshotTo(ctx context.Context, w io.Writer) (int64, error) {
	if err := s.r.begin(); err != nil {
		return 0, err
	}
	defer s.r.runs.Done()
	if err := s.take(ctx); err != nil {
		return 0, s.stopped(err)
	}
	defer s.give()
	if err := s.usable(); err != nil {
		return 0, err
	}
	if s.inst == nil {
		rd, done, err := s.thawed()
		if err != nil {
			return 0, err
		}
		defer done()
		return io.Copy(w, rd)
	}
	return s.snapshot(w, int64(s.r.opts.Sessions.MaxSnapshot))
}

// snapshot writes the live Guest's snapshot to w, at most limit bytes.
func (s *Session) snapshot(w io.Writer, limit int64) (int64, error) {
	st, err := s.inst.StateIndex()
	if err != nil {
		if errors.Is(err, engine.ErrFilesOpen) {
			return 0, fmt.Errorf("%w: it holds %d files or directories open", ErrSessionState, s.inst.FilesOpen())
		}
		return 0, err
	}
	return writeSnapshot(w, s.r.identity, st, func(i int, dst []byte) { s.inst.StatePage(st, i, dst) }, limit)
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
	s.r.sessions.leaveLive(s)
	s.fail(fmt.Errorf("%w: it held files open, so it could not be hibernated when room was needed among the %d live sessions", ErrSessionLost, s.r.opts.Sessions.MaxLive))
	return true
}

// hibernate keeps the live Guest's snapshot and frees the Guest.
func (s *Session) hibernate() error {
	if s.inst == nil {
		return nil
	}
	if d := s.r.sessionDir; d != nil {
		if err := s.hibernateToFile(d.path); err != nil {
			return err
		}
	} else {
		var c chunks
		if _, err := s.snapshot(&c, int64(s.r.opts.Sessions.MaxSnapshot)); err != nil {
			return err
		}
		if !s.r.sessions.holdFrozen(s, c.n) {
			return fmt.Errorf("%w: a snapshot of %d bytes would take the hibernated sessions of %s past HibernatedMemory", ErrTooManySessions, c.n, s.tenant.label())
		}
		s.frozen = &c
	}
	if f := s.r.opts.Sessions.OnHibernate; f != nil {
		if rd, done, err := s.thawed(); err == nil {
			f(s, rd)
			done()
		}
	}
	s.inst.Close()
	s.inst = nil
	s.r.sessions.leaveLive(s)
	return nil
}

// hibernateToFile writes the live Guest's snapshot to a file in dir,
// counted against SessionOptions.DirBytes and the tenant's share: a
// temporary file renamed into place once whole, readable by the owner
// only, and removed on any failure.
func (s *Session) hibernateToFile(dir string) error {
	room := s.r.sessions.diskRoom(s)
	full := fmt.Errorf("%w: its snapshot would take the hibernated sessions of %s past their limit of bytes in the session folder (DirBytes)", ErrTooManySessions, s.tenant.label())
	if room <= 0 {
		return full
	}
	tmp, err := os.CreateTemp(dir, ".snapshot-*")
	if err != nil {
		return fmt.Errorf("spine: hibernating a session: %w", err)
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	w := bufio.NewWriterSize(tmp, snapshotChunk)
	n, err := writeSnapshotLimited(s, w, room)
	if err == nil {
		err = w.Flush()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	switch {
	case errors.Is(err, errOverRoom):
		return full
	case err != nil:
		return fmt.Errorf("spine: hibernating a session: %w", err)
	case !s.r.sessions.holdDisk(s, n):
		return full // others took the room meanwhile
	}
	path := filepath.Join(dir, s.id+".snapshot")
	if err := os.Rename(tmp.Name(), path); err != nil {
		s.r.sessions.holdDisk(s, -n)
		return fmt.Errorf("spine: hibernating a session: %w", err)
	}
	s.file, s.size = path, n
	return nil
}

// errOverRoom is a snapshot past the room left for it.
var errOverRoom = errors.New("no room left")

// writeSnapshotLimited writes the live Guest's snapshot to w, failing with
// errOverRoom past room bytes (and ErrSnapshotTooLarge past MaxSnapshot).
func writeSnapshotLimited(s *Session, w io.Writer, room int64) (int64, error) {
	limit := int64(s.r.opts.Sessions.MaxSnapshot)
	n, err := s.snapshot(w, min(room, limit))
	if room < limit && errors.Is(err, ErrSnapshotTooLarge) {
		return n, errOverRoom
	}
	return n, err
}

// thawed returns a reader of the hibernated session's snapshot; done
// closes it.
func (s *Session) thawed() (rd io.Reader, done func(), err error) {
	if s.file != "" {
		f, err := os.Open(s.file)
		if err != nil {
			return nil, nil, fmt.Errorf("spine: waking a session: %w", err)
		}
		return bufio.NewReaderSize(f, snapshotChunk), func() { f.Close() }, nil
	}
	if s.frozen == nil {
		return nil, nil, fmt.Errorf("%w: no Guest and no snapshot", ErrSessionLost)
	}
	return s.frozen.reader(), func() {}, nil
}

// forgetSnapshot drops the hibernated snapshot once the Guest is live again.
func (s *Session) forgetSnapshot() {
	if s.file != "" {
		os.Remove(s.file)
		s.r.sessions.holdDisk(s, -s.size)
		s.file, s.size = "", 0
	}
	if s.frozen != nil {
		s.r.sessions.holdFrozen(s, -s.frozen.n)
		s.frozen = nil
	}
}
