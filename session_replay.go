package spine

import (
	"context"
	"fmt"
)

// Continue carries on a session's run from its record (Record.Session set,
// a ToolWait.Record or ApprovalCall.Record taken where the run waited), in
// this session, as Runner.Continue does outside one: the recorded part is
// replayed (no tool called, the recorded clock reads and random bytes) and
// where the record ends the run goes on live. The session's state must be
// the one the recorded run started from: the session's snapshot taken
// before that run, restored here or on another machine (a session store's
// generation, say). The record does not hold that state, and Continue
// cannot check it: the caller vouches for it. Continue checks what
// CheckSessionRecord does. In a state other than the run's, the program
// may ask for something else than the record holds (the run stops with an
// error matching ErrDiverged), or end before the record does, as that
// state makes it: a caller that cannot vouch for the state checks the
// outcome (Output.Record's calls, its own tools' calls).
//
// req is as for Runner.Continue. Like Run, Continue waits for the
// session's turn, and a continuation that does not end cleanly (a
// divergence, its ctx, its time limit) loses the session as a run would.
// Its record (req.Record) is the whole run's, as a run of this session.
func (s *Session) Continue(ctx context.Context, rec *Record, req Request) (*Output, error) {
	return s.recorded(ctx, rec, func(ctx context.Context, plain *Record) (*Output, error) {
		req.session = s
		return s.r.Continue(ctx, plain, req)
	})
}

// recorded runs run, Continue's or Replay's, with the session's turn, on
// rec checked and without its Session (the rest is checked as the
// Runner's, in this session).
func (s *Session) recorded(ctx context.Context, rec *Record, run func(context.Context, *Record) (*Output, error)) (*Output, error) {
	r := s.r
	if err := r.CheckSessionRecord(rec); err != nil {
		return nil, err
	}
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
	plain := *rec
	plain.Session = nil
	return run(ctx, &plain)
}

// Replay runs a session's recorded run again in this session, from its
// record, as Runner.Replay does outside one: no tool called, the recorded
// clock reads and random bytes, the Output the recorded run's (its outcome
// checked). The session's state must be the one the run started from (its
// snapshot taken before the run, restored), as for Continue; the session
// then holds the state the run left. Like Run, it waits for the session's
// turn.
func (s *Session) Replay(ctx context.Context, rec *Record, opts *ReplayOptions) (*Output, error) {
	return s.recorded(ctx, rec, func(ctx context.Context, plain *Record) (*Output, error) {
		return s.r.replay(ctx, plain, opts, s)
	})
}

// CheckSessionRecord says why no session of the Runner can continue rec
// (Session.Continue), or nil: a record of a run outside a session
// (ErrBadRequest; Runner.Continue takes it), of another image
// (ErrDiverged), or one CheckRecord refuses for another reason than its
// session. It runs nothing, and says nothing of the session's state.
func (r *Runner) CheckSessionRecord(rec *Record) error {
	switch {
	case rec == nil:
		return fmt.Errorf("%w: no record", ErrBadRequest)
	case rec.Session == nil:
		return fmt.Errorf("%w: the record is of a run outside a session: Runner.Continue continues it", ErrBadRequest)
	case rec.Session.Image != r.guest.Image:
		return fmt.Errorf("%w: the record's session had another image (%.12s, this Runner's %.12s)%s",
			ErrDiverged, rec.Session.Image, r.guest.Image, r.toolDifference(rec.Tools))
	}
	plain := *rec
	plain.Session = nil
	return r.CheckRecord(&plain)
}
