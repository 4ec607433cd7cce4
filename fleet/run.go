package fleet

import (
	"bufio"
	"context"
	"errors"
	"io"
	"math"
	"os"

	"github.com/spine-run/spine"
)

// Run runs req in e: the store's newest state first (loaded when another
// replica wrote it), then the run, then its write (Options.Write). The
// caller holds e's lock. A run Cut stops returns ErrCut and leaves e as it
// was before the run.
func (f *Fleet) Run(ctx context.Context, e *Session, req spine.Request) (*spine.Output, error) {
	if f.IsCut() {
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
			defer func() {
				before.Close()
				os.Remove(before.Name())
			}()
		}
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(f.cut, cancel)()
	out, err := e.s.Run(runCtx, req)
	if err != nil && f.IsCut() && !errors.As(err, new(*spine.PythonError)) {
		f.undo(ctx, e, dirty, before)
		return out, ErrCut
	}
	return out, f.commit(ctx, e, err)
}

// undo leaves e, whose run Cut stopped, as it was before the run: the
// store's state, or the snapshot before, written in its place. The live
// state, half a run, is never written.
func (f *Fleet) undo(ctx context.Context, e *Session, dirty bool, before *os.File) {
	if f.opts.Store == nil {
		return
	}
	e.stale = true
	if !dirty {
		return // the store holds the state before the run
	}
	if before == nil {
		f.opts.Logger.Warn("a run cut by the drain is undone to the session's last stored state: its state before the run could not be snapshotted", "session", e.id)
		return
	}
	ctx, cancel := f.storeCtx(ctx)
	defer cancel()
	err := f.put(ctx, e, func(w io.Writer) error {
		_, err := io.Copy(w, io.NewSectionReader(before, 0, math.MaxInt64))
		return err
	})
	e.stale = true
	if err != nil {
		f.opts.Logger.Error("writing a session's state before its cut run to the store failed", "session", e.id, "error", err)
	}
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

// keep writes the snapshot of e's live state to a new file, which the
// caller closes and removes: in the Runner's SessionOptions.Dir, else the
// system's temporary folder. It streams, so it takes no more memory than a
// write to the store, whatever the session's size. nil when it could not
// be made; the caller holds e's lock.
func (f *Fleet) keep(ctx context.Context, e *Session) *os.File {
	file, err := os.CreateTemp(f.runner.Options().Sessions.Dir, "spine-before-run-*")
	if err != nil {
		return nil
	}
	bw := bufio.NewWriterSize(file, snapshotBuffer)
	if _, err = e.s.SnapshotTo(ctx, bw); err == nil {
		err = bw.Flush()
	}
	if err != nil {
		file.Close()
		os.Remove(file.Name())
		return nil
	}
	return file
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
// generation after the store's newest; the caller holds e's lock.
func (f *Fleet) Fresh(ctx context.Context, e *Session) error {
	e.settle()
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
	old, ok := f.swap(e, sess)
	if !ok {
		sess.Close(context.Background())
		return ErrNoSession
	}
	if old != nil {
		old.Close(context.Background())
	}
	e.gen, e.stale, e.dirty = gen, false, true
	return nil
}
