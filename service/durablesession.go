package service

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/fleet"
)

// A session's durable runs (docs/scaling.md, "Paused runs"). Under the
// write policy run, the store holds a session's state from before each of
// its runs, at the generation the run started from (fleet.Fleet.RunStart):
// a session's run that pauses is kept as a /v1/run run is (durable.go),
// its stored pause naming the session and that generation as well. A
// takeover loads the session at exactly that generation (a newer one: the
// session moved on, 409), holds it as a run does (its lock, until the run
// ends), continues the record in it (fleet.Fleet.Continue, then
// spine.Session.Continue), and the run's end writes the next generation as
// any run's end does. The replica the run leaves (drained, or a takeover
// won the run's key) writes nothing of the session's state mid-run and
// marks its live state as not the store's (leftSession). Under answer and hibernate, the store
// may lack the session's state from before the run (it holds an older
// one), so nothing could vouch for it: those runs live on their replica.

// durableSessions says whether a session's runs may be kept in the store:
// under the write policy run.
func (s *pausedDesk) durableSessions() bool {
	o := s.fleet.Options()
	return o.Store != nil && o.Write == fleet.WriteRun
}

// sessionAt names, in sr, the session pr runs in and the generation its run
// started from; an error when the store lacks that state. Without a
// session, nothing.
func (pr *pausedRun) sessionAt(sr *storedRun) error {
	if pr.sess == nil {
		return nil
	}
	gen, ok := pr.s.fleet.RunStart(pr.sess)
	if !ok {
		return errors.New("the store lacks the session's state from before the run")
	}
	sr.Session, sr.SessionGen = pr.sess.ID(), gen
	return nil
}

// leftSession marks the session of a run that ended with cause, when the
// run leaves this replica (handed off, taken over): its live state is half
// the run's, which neither this replica nor its drain may write or serve;
// the store holds the state before the run, and the session's next
// operation here loads the store's. The run holds the session's lock.
func (pr *pausedRun) leftSession(cause error) {
	if pr.sess != nil && pr.durable && kept(cause) {
		pr.s.fleet.Left(pr.sess)
	}
}

// holdSession takes the session of sr, a session's run taken over, as a
// run takes its session: loaded from the store (holding a slot while it
// restores) unless this replica holds it, then locked, waiting for the
// operation in flight in it (within the run's time limit) without a slot.
// nil and why not (a status, a kind, a message), having released it.
func (s *pausedDesk) holdSession(r *http.Request, sr storedRun, owner string) (_ *fleet.Session, status int, kind, msg string) {
	e, err := s.fleet.Get(sr.Session, owner)
	if errors.Is(err, fleet.ErrNoSession) {
		select {
		case s.slots <- struct{}{}:
		default:
			return nil, http.StatusTooManyRequests, kindOverloaded, fmt.Sprintf("all %d run slots are busy; send the same continuation again later (the run waits)", cap(s.slots))
		}
		s.metrics.inFlight.Inc()
		ctx, cancel := context.WithTimeout(r.Context(), s.opts.MaxTimeout)
		e, err = s.fleet.Load(ctx, sr.Session, owner)
		cancel()
		<-s.slots
		s.metrics.inFlight.Dec()
	}
	if err == nil {
		ctx, cancel := context.WithTimeout(r.Context(), cmp.Or(sr.Limit, s.opts.MaxTimeout))
		err = e.Lock(ctx)
		cancel()
		if err != nil {
			status, kind, msg = s.sessions.sessionError(r.Context(), e, err)
			s.fleet.Release(e)
			return nil, status, kind, fmt.Sprintf("run %s: its session %s: %s", sr.RunID, sr.Session, msg)
		}
		return e, 0, "", ""
	}
	status, kind, msg = s.sessions.sessionError(r.Context(), nil, err)
	if status == http.StatusNotFound {
		msg = "it is gone (deleted or expired)"
	}
	return nil, status, kind, fmt.Sprintf("run %s cannot continue: its session %s: %s", sr.RunID, sr.Session, msg)
}

// atRunStart checks that e, the session of sr, held (holdSession), is at
// the generation its run started from, loading the store's newest: why
// not (a status, a kind, a message), or "". The caller holds a slot.
func (s *pausedDesk) atRunStart(r *http.Request, e *fleet.Session, sr storedRun) (status int, kind, msg string) {
	ctx, cancel := context.WithTimeout(r.Context(), s.opts.MaxTimeout)
	defer cancel()
	gen, err := s.fleet.Generation(ctx, e)
	switch {
	case err != nil:
		status, kind, msg = s.sessions.sessionError(r.Context(), e, err)
		return status, kind, fmt.Sprintf("run %s: its session %s: %s", sr.RunID, sr.Session, msg)
	case gen != sr.SessionGen:
		return http.StatusConflict, kindConflict, fmt.Sprintf("run %s cannot continue: session %s moved on since the run started (generation %d, the run's %d)", sr.RunID, sr.Session, gen, sr.SessionGen)
	}
	return 0, "", ""
}

// checkRecordOf says why this replica cannot continue rec, the record of
// sr: a session's run's or another.
func (s *pausedDesk) checkRecordOf(sr storedRun, rec *spine.Record) error {
	if sr.Session != "" {
		if !s.durableSessions() {
			return errors.New("a session's run, and this replica's write policy is not run")
		}
		return s.runner.CheckSessionRecord(rec)
	}
	return s.runner.CheckRecord(rec)
}
