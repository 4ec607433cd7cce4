package service

import (
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

// takeSession loads and locks the session of sr, a session's run taken
// over, at the generation its run started from: nil and why not (a status,
// a kind, a message), having released it.
func (s *pausedDesk) takeSession(r *http.Request, sr storedRun, owner string) (_ *fleet.Session, status int, kind, msg string) {
	ctx, cancel := context.WithTimeout(r.Context(), s.opts.MaxTimeout)
	defer cancel()
	e, err := s.fleet.Get(sr.Session, owner)
	if errors.Is(err, fleet.ErrNoSession) {
		e, err = s.fleet.Load(ctx, sr.Session, owner)
	}
	if err == nil {
		if err = e.Lock(ctx); err != nil {
			s.fleet.Release(e)
		}
	}
	var gen uint64
	if err == nil {
		if gen, err = s.fleet.Generation(ctx, e); err != nil || gen != sr.SessionGen {
			e.Unlock()
			s.fleet.Release(e)
		}
	}
	switch st, k, m, ok := storeAnswer(err); {
	case err == nil && gen != sr.SessionGen:
		return nil, http.StatusConflict, kindConflict, fmt.Sprintf("run %s cannot continue: session %s moved on since the run started (generation %d, the run's %d)", sr.RunID, sr.Session, gen, sr.SessionGen)
	case err == nil:
		return e, 0, "", ""
	case errors.Is(err, spine.ErrClosed):
		return nil, http.StatusServiceUnavailable, kindClosed, fmt.Sprintf("run %s: the server is shutting down; the run is kept in the session store: send the same continuation again, and another replica continues it", sr.RunID)
	case errors.Is(err, fleet.ErrNoSession):
		return nil, http.StatusNotFound, kindNotFound, fmt.Sprintf("run %s cannot continue: its session %s is gone (deleted or expired)", sr.RunID, sr.Session)
	case ok:
		return nil, st, k, fmt.Sprintf("run %s: its session %s: %s", sr.RunID, sr.Session, m)
	case errors.As(err, new(*fleet.TurnError)):
		return nil, http.StatusConflict, kindConflict, fmt.Sprintf("run %s: its session %s is busy: %v", sr.RunID, sr.Session, err)
	}
	return nil, http.StatusServiceUnavailable, kindStoreUnavailable, fmt.Sprintf("run %s: its session %s could not be loaded: %v", sr.RunID, sr.Session, err)
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
