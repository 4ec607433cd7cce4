package fleet

import (
	"bufio"
	"context"
	"io"
	"math"
	"os"
)

// A run Cut stops is undone (Fleet.Run): the state before it is kept in a
// file while it runs (keep), and written back in its place (undo).

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

// keep writes the snapshot of e's live state to a new file, which the
// caller closes: in the Runner's SessionOptions.Dir, else the system's
// temporary folder, and removed from it at once (the open file is all that
// holds it), so that a process killed mid-run leaves nothing behind; where
// an open file cannot be removed, none is kept. It
// streams, so it takes no more memory than a write to the store, whatever
// the session's size. nil when it could not be made; the caller holds e's
// lock.
func (f *Fleet) keep(ctx context.Context, e *Session) *os.File {
	file, err := os.CreateTemp(f.runner.Options().Sessions.Dir, "spine-before-run-*")
	if err != nil {
		return nil
	}
	if os.Remove(file.Name()) != nil { // where an open file cannot be removed (Windows): none kept
		file.Close()
		os.Remove(file.Name())
		return nil
	}
	bw := bufio.NewWriterSize(file, snapshotBuffer)
	if _, err = e.s.SnapshotTo(ctx, bw); err == nil {
		err = bw.Flush()
	}
	if err != nil {
		file.Close()
		return nil
	}
	return file
}
