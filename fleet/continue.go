package fleet

import (
	"context"
	"errors"
	"fmt"

	"github.com/spine-run/spine"
)

// A session's run that pauses for its caller can move to another replica
// (docs/scaling.md, "Paused runs"): under WriteRun the store holds the
// session's state from before the run, at the generation the run started
// from (RunStart), and another replica continues the run's record
// (spine.Session.Continue) in the session loaded at exactly that
// generation (Continue), then writes the run's end as Run does. The
// replica the run leaves writes nothing of its state: the run stops there
// with an error the Fleet does not write (not a Python exception), and the
// front door marks the session's live state as not the store's (Left).

// ErrMovedOn is a session's run continued from the generation it started
// from when the store holds a newer one: the session was written since
// (another run ended in it), so the run cannot go on from its state.
var ErrMovedOn = errors.New("the session was written since the run started (it moved on): the run cannot continue from the state it started from")

// RunStart returns the generation of the store that holds e's state as
// the run in flight in it started: e's live state is that generation's
// (WriteRun stores each run before its answer). ok is false without a
// store, under another policy, or when the store lacks e's live state (a
// write that failed). The caller holds e's lock (the run does).
func (f *Fleet) RunStart(e *Session) (gen uint64, ok bool) {
	if f.opts.Store == nil || f.opts.Write != WriteRun || e.dirty || e.stale || e.gen == 0 {
		return 0, false
	}
	return e.gen, true
}

// Generation makes e's live state the store's newest (loading it when
// another replica wrote it) and returns that generation; the caller holds
// e's lock. Without a store, or when the store lacks e's live state, an
// error.
func (f *Fleet) Generation(ctx context.Context, e *Session) (uint64, error) {
	if f.opts.Store == nil {
		return 0, ErrNoSession
	}
	if err := f.refresh(ctx, e); err != nil {
		return 0, err
	}
	if e.dirty {
		return 0, fmt.Errorf("session %s has runs the store lacks", e.id)
	}
	return e.gen, nil
}

// Continue carries on a session's run from rec, its record, in e, whose
// state must be generation gen's, the one the run started from (RunStart on
// the replica that ran it): e is loaded from the store first, and a newer
// generation is ErrMovedOn, the run not started. The run's end is written
// as Run's is, as generation gen+1; a run Cut stops is undone. Only under
// WriteRun with a store (else ErrMovedOn: nothing vouches for the state).
// The caller holds e's lock.
func (f *Fleet) Continue(ctx context.Context, e *Session, gen uint64, rec *spine.Record, req spine.Request) (*spine.Output, error) {
	if f.opts.Store == nil || f.opts.Write != WriteRun {
		return nil, fmt.Errorf("%w (no store, or a write policy other than run)", ErrMovedOn)
	}
	return f.run(ctx, e, func(ctx context.Context, s *spine.Session) (*spine.Output, error) {
		if e.gen != gen || e.dirty {
			return nil, fmt.Errorf("%w: it started from generation %d, the store holds %d", ErrMovedOn, gen, e.gen)
		}
		return s.Continue(ctx, rec, req)
	})
}

// Left marks e's live state as not the store's: the run in flight in it
// left this replica (another continues it from the store), so that its
// half is never written nor served. e's next operation loads the store's
// state, and Close writes nothing of it. The caller holds e's lock.
func (f *Fleet) Left(e *Session) {
	e.stale = true
}
