package service

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/door"
)

// A drain (docs/scaling.md, "Rollouts"): Drain makes GET /readyz answer 503
// at once and every new request but the probes and /metrics answer 503
// (kind closed, Retry-After), while the requests in flight go on, and the
// runs paused for their callers, whose continuations are still admitted;
// Wait waits for them; Cut stops the runs still going, which are answered 503;
// Close then writes every session to the store. GET /livez and GET
// /healthz answer all along.
//
//	GET /livez   200 {"status": "ok"} while the process serves at all
//	GET /readyz  200 {"status": "ready"}, or 503 {"status": "draining"}

// drainState is the Server's drain.
type drainState struct {
	mu       sync.Mutex
	draining bool
	inFlight int           // requests past ServeHTTP's drain check, not yet answered
	idle     chan struct{} // closed when inFlight reaches 0 while draining

	cut     context.Context // done once Cut is called
	doCut   context.CancelFunc
	cutOnce sync.Once
}

func (d *drainState) init() {
	d.cut, d.doCut = context.WithCancel(context.Background())
	d.idle = make(chan struct{})
}

// enter counts a request in flight, or reports false while draining.
func (d *drainState) enter() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.draining {
		return false
	}
	d.inFlight++
	return true
}

// hold counts a request, or a run paused for its caller, in flight, even
// while draining: one the drain must wait for.
func (d *drainState) hold() {
	d.mu.Lock()
	d.inFlight++
	d.mu.Unlock()
}

// leave ends a request counted by enter, or what hold counted.
func (d *drainState) leave() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.inFlight--; d.inFlight == 0 && d.draining {
		d.closeIdle()
	}
}

// closeIdle closes idle once; d.mu is held.
func (d *drainState) closeIdle() {
	select {
	case <-d.idle:
	default:
		close(d.idle)
	}
}

// isDraining reports whether Drain was called.
func (d *drainState) isDraining() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.draining
}

// Drain starts the Server's drain: GET /readyz answers 503 from now on, and
// so does every new request but GET /livez, /readyz, /healthz and /metrics
// (kind closed, with Retry-After), so that a load balancer sends them to
// another replica. Requests in flight go on. It is safe to call more than
// once.
func (s *Server) Drain() {
	d := &s.drain
	d.mu.Lock()
	d.draining = true
	if d.inFlight == 0 {
		d.closeIdle()
	}
	d.mu.Unlock()
	if s.desk.runStore != nil {
		s.desk.paused.handOffAll() // the store keeps them for another replica (durable.go)
	}
}

// Wait waits, after Drain, until no request is in flight, or ctx ends
// (its error).
func (s *Server) Wait(ctx context.Context) error {
	select {
	case <-s.drain.idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Cut stops every request still in flight: each run stops and is answered
// 503 (kind closed), never left without an answer, and a session's run is
// undone: the session is left as it was before it, under every write
// policy (fleet.Fleet.Cut). Call it after Drain, when the grace period
// ends; then Wait again for the answers to go out.
func (s *Server) Cut() {
	s.fleet.Cut() // first: a session's run ended by its request's cut is the Fleet's cut
	s.drain.cutOnce.Do(s.drain.doCut)
	s.desk.paused.cancelAll(spine.ErrClosed) // those paused, which no request holds
}

// continuesHeld reports whether r, which came while the Server drains,
// continues a run paused for its caller that the Server holds: the drain
// waits for such runs, so it admits their continuations (counted in
// flight).
func (s *Server) continuesHeld(r *http.Request) bool {
	rest, ok := strings.CutPrefix(r.URL.Path, "/v1/runs/")
	if !ok || r.Method != http.MethodPost {
		return false
	}
	id, _, _ := strings.Cut(rest, "/")
	return s.desk.paused.holds(id, s.drain.hold)
}

// cutDone reports whether Cut was called.
func (d *drainState) cutDone() bool { return d.cut.Err() != nil }

// enterRequest counts r in flight and returns it with a context that Cut ends, or
// answers 503 and returns nil while draining. Probes and /metrics pass
// uncounted.
func (s *Server) enterRequest(w http.ResponseWriter, r *http.Request) (*http.Request, func()) {
	if door.IsProbe(r.URL.Path) || r.URL.Path == "/metrics" {
		return r, func() {}
	}
	if !s.drain.enter() && !s.continuesHeld(r) {
		dropBody(w, r)
		closeConn(w)
		w.Header().Set("Retry-After", "1")
		door.NoteDrained(w)
		s.refuse(w, time.Now(), http.StatusServiceUnavailable, kindClosed, door.DrainingMessage)
		return nil, nil
	}
	ctx, cancel := context.WithCancel(r.Context())
	stop := context.AfterFunc(s.drain.cut, cancel)
	return r.WithContext(ctx), func() {
		stop()
		cancel()
		s.drain.leave()
	}
}

// cutAnswer revises the answer to a request that failed after Cut: 503,
// the server shut down before it ended.
func (d *drainState) cutAnswer(w http.ResponseWriter, status int, e *Error) (int, *Error) {
	if e == nil || !d.cutDone() {
		return status, e
	}
	w.Header().Set("Retry-After", "1")
	return http.StatusServiceUnavailable, &Error{Kind: kindClosed, Message: "the server shut down before the run ended (its grace period for runs in flight ran out); the run was stopped"}
}

func (s *Server) handleReadyz(w http.ResponseWriter, r *http.Request) {
	if s.drain.isDraining() {
		door.NoteDrained(w)
		writeJSON(w, http.StatusServiceUnavailable, door.Probe{Status: "draining"})
		return
	}
	writeJSON(w, http.StatusOK, door.Probe{Status: "ready", Down: door.DownComponents(s.opts.Health)})
}
