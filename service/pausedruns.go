package service

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/sessionstore"
)

// pausedDesk serves the runs paused for their callers: runs with client
// tools (paused.go, pausedtool.go, pausedstream.go), with approvals
// (approvals.go), with a request's mcp_servers (mcpservers.go), and those
// kept in the store for another replica (durable.go). The Server holds one;
// it holds the runs, their ids and their store, and reaches through the
// Server it embeds for what every request needs (slots, refusals, answers,
// the drain).
type pausedDesk struct {
	*Server
	paused   pausedRuns         // the runs with client tools (paused.go)
	runIDs   runIDs             // their ids (runid.go)
	runStore sessionstore.Store // the paused runs kept in SessionStore (durable.go); nil without
	remote   *remoteServers     // a run request's mcp_servers (mcpservers.go)
	loading  chan struct{}      // takeovers loading a run from the store at once (durable.go)
}

// newPausedDesk returns s's desk of paused runs, for o, s's Options.
func newPausedDesk(s *Server, o *Options) *pausedDesk {
	d := &pausedDesk{Server: s, runIDs: newRunIDs(o.Replica), remote: newRemoteServers(o), loading: make(chan struct{}, maxLoading)}
	if o.SessionStore != nil {
		d.runStore = sessionstore.Runs(o.SessionStore)
	}
	return d
}

// pausedRuns are the runs with client tools, by id.
type pausedRuns struct {
	mu      sync.Mutex
	runs    map[string]*pausedRun
	live    int            // runs not ended
	byOwner map[string]int // live runs of each owner
}

// add makes a run's entry for owner, or says why not: Options.MaxPaused,
// or the owner's share of it when the Server has several tokens.
func (s *pausedDesk) addRun(owner string) (*pausedRun, string) {
	t := &s.paused
	limit := s.opts.MaxPaused
	if n := s.tenants.Len(); n > 1 {
		limit = max(1, limit/n)
	}
	pr := &pausedRun{s: s, id: s.runIDs.next(), owner: owner,
		calls: map[int]*clientCall{}, asked: map[string]bool{}, delivered: map[string]toolResult{}, events: make(chan runEvent, 1), finished: make(chan struct{})}
	pr.ctx, pr.cancel = context.WithCancelCause(context.Background())
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.live >= s.opts.MaxPaused {
		return nil, fmt.Sprintf("the server holds %d runs that may pause for their caller (client tools, approvals), its limit (--paused); try again later", t.live)
	}
	if t.byOwner[owner] >= limit {
		return nil, fmt.Sprintf("this token holds %d runs that may pause for their caller (client tools, approvals), its share of the server's limit; answer or abandon one first", limit)
	}
	if t.runs == nil {
		t.runs, t.byOwner = map[string]*pausedRun{}, map[string]int{}
	}
	t.runs[pr.id] = pr
	t.live++
	t.byOwner[owner]++
	s.drain.hold() // a drain waits for the run (drain.go)
	return pr, ""
}

// ended takes pr out of the live runs, and out of the table after keep.
func (t *pausedRuns) ended(pr *pausedRun, keep time.Duration) {
	t.mu.Lock()
	t.live--
	if t.byOwner[pr.owner]--; t.byOwner[pr.owner] == 0 {
		delete(t.byOwner, pr.owner)
	}
	if keep <= 0 {
		delete(t.runs, pr.id)
	}
	t.mu.Unlock()
	pr.s.drain.leave()
	if keep > 0 {
		time.AfterFunc(keep, func() {
			t.mu.Lock()
			delete(t.runs, pr.id)
			t.mu.Unlock()
		})
	}
}

// stopAll stops every run with client tools, and waits until each has
// ended (and given back its session).
func (t *pausedRuns) stopAll() {
	t.mu.Lock()
	runs := make([]*pausedRun, 0, len(t.runs))
	for _, pr := range t.runs {
		runs = append(runs, pr)
	}
	t.mu.Unlock()
	for _, pr := range runs {
		pr.cancel(spine.ErrClosed)
		<-pr.finished
	}
}

// cancelAll stops every run with client tools with cause, not waiting.
func (t *pausedRuns) cancelAll(cause error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, pr := range t.runs {
		pr.cancel(cause)
	}
}

// holds reports whether run id is held and has not ended, and if so calls
// enter under the run's lock: the run cannot end in between (run sets
// ended under it first).
func (t *pausedRuns) holds(id string, enter func()) bool {
	t.mu.Lock()
	pr := t.runs[id]
	t.mu.Unlock()
	if pr == nil {
		return false
	}
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if pr.ended {
		return false
	}
	enter()
	return true
}

func (t *pausedRuns) get(id, owner string) *pausedRun {
	t.mu.Lock()
	defer t.mu.Unlock()
	if pr := t.runs[id]; pr != nil && pr.owner == owner {
		return pr
	}
	return nil
}

// continuationSlot takes a run slot for a paused run's continuation, or
// says why not: 429, with Retry-After, the caller to send the same what
// again (the run waits).
func (s *pausedDesk) continuationSlot(w http.ResponseWriter, what string) (status int, kind, msg string) {
	select {
	case s.slots <- struct{}{}:
		s.metrics.inFlight.Inc()
		return 0, "", ""
	default:
		w.Header().Set("Retry-After", "1")
		return http.StatusTooManyRequests, kindOverloaded, fmt.Sprintf("all %d run slots are busy; send the same %s again later (the run waits)", cap(s.slots), what)
	}
}

// answeredEnd answers a continuation of pr, which has ended or was stopped
// (handed off, taken over: it is ending), with its end (kept after
// --tool-wait), and reports true; else false. Called under pr.mu, which it
// releases when it answers.
func (pr *pausedRun) answeredEnd(w http.ResponseWriter, start time.Time) bool {
	if !pr.ended && pr.ctx.Err() == nil {
		return false
	}
	pr.mu.Unlock()
	<-pr.finished // its answer is made
	pr.mu.Lock()
	ev := pr.final
	pr.mu.Unlock()
	ev.write(w, start)
	return true
}
