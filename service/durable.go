package service

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/fleet"
	"github.com/spine-run/spine/sessionstore"
)

// Durable pauses (docs/scaling.md, "Paused runs"). With a session store, a
// run that may pause for its caller is recorded (spine.Request.Record), and
// at each pause, for its client tools' results or for a decision on a call
// Approve deferred, its record so far (spine.ToolWait.Record,
// spine.ApprovalCall.Record) is written to the store, before the pause is
// answered, as a generation of its own key (sessionstore.Runs:
// runs/<SHA-256 of the run id>/<generation>). A continuation (tool_results
// or approvals) that reaches a replica not holding the run (its replica
// drained, died or restarted) loads it there: the replica checks the
// continuation and what the store holds, writes the stored pause under the
// run's new id (should this replica die before the next pause, a
// continuation of the new id takes the run over again), claims the run by
// writing the next generation of its key, create-only, naming the new id (a
// second replica racing for it loses that write, drops its copy and answers
// 409), and continues it
// from its record (spine.Runner.Continue) to the same pause, whose pending
// calls or approval must be the stored ones, then applies the results or
// the decision and goes on. The run now lives here under the new id, which
// its answers carry. Its keys go when it ends; a replica that shuts down
// (or drains) keeps them for another to continue.
//
// Runs kept so: a /v1/run request's that may pause (with "tools", or any on
// a Server whose Runner asks for approvals), without mcp_servers, answered
// as JSON or as events, with early reads or without (as events, without),
// and so a session's run under the write policy run (durablesession.go),
// answered as JSON, without early reads.
// A pause of a run with early reads lists the read-only calls asked
// together with the one the program waits in; the record of the wait lists
// them too (spine.Record.Waiting), and the continuation takes them up under
// the same numbers, so the pause it reaches lists the same ids. A call the
// caller answered at an earlier pause whose Call had not returned when the
// run paused again is on that record without its response: the store
// keeps its result (storedRun.Answered), which answers it when the
// continuation takes it up. A run answered as events sends a pause's
// tool_call or approval_required event once the store has the pause
// (announcePause); a continuation that takes it over and asks for events is
// answered with the run's events from that pause on (the replay's output is
// not sent again: streamFrom), under the new id its events carry, and the
// run goes on as one answered as events there (a session's run, or one
// with early reads, is answered as JSON whatever its continuation asks).
// Not kept: a session's run
// under the policies answer and hibernate, with early reads or answered as
// events, a run answered as events with early reads, a stream's
// (/v1/run/stream), and POST /v1/tool/call's; they live on their replica.

// maxStoredRun bounds a stored run: its record (spine.Options.MaxRecord)
// and what the service keeps beside it.
const maxStoredRun = 64 << 20

// maxLoading bounds the takeovers that load a stored run at once, each
// holding up to maxStoredRun, before their continuation is checked.
const maxLoading = 4

// kindRunDiverged: a run continued from its record did not reach its pause.
const kindRunDiverged = "run_diverged"

var (
	errHandedOff = errors.New("the replica drains: the run is kept in the store for another")
	errMoved     = errors.New("the run continues on another replica")
)

// storedRun is what the store holds of a paused run, beside its record.
type storedRun struct {
	RunID   string        `json:"run_id"`
	Replica string        `json:"replica,omitempty"` // the replica that wrote it
	MovedTo string        `json:"moved_to,omitempty"`
	Tools   []ClientTool  `json:"tools,omitempty"`
	Limit   time.Duration `json:"limit_ns,omitempty"`
	Used    time.Duration `json:"used_ns,omitempty"`
	Record  bool          `json:"record,omitempty"` // the caller asked for the run's record
	Call    int           `json:"call,omitempty"`   // the call the run waits for
	Pending []PendingCall `json:"pending,omitempty"`
	// Approval is the call the run waits in for its caller's decision, in
	// place of Call and Pending; Entered the calls of its tools that reached
	// their Call before it (all answered).
	Approval *ApprovalRequest `json:"approval,omitempty"`
	Entered  int              `json:"entered,omitempty"`
	Asked    int              `json:"asked,omitempty"` // the approvals it asked before this pause
	// Answered are results the run had of calls its record lists as not
	// finished where it waited (answered, their Call not yet returned):
	// a continuation answers them again from here, asking nothing.
	Answered []toolResult `json:"answered,omitempty"`
	// Before are the run's earlier ids, oldest first, of a run taken over:
	// each kept as a claim naming the next, until the run ends.
	Before []string `json:"before,omitempty"`
	Run    []byte   `json:"run,omitempty"` // the record so far (spine.Record.Encode)
	// Session is the session a session's run runs in, SessionGen the
	// generation of it the run started from (durablesession.go).
	Session    string `json:"session,omitempty"`
	SessionGen uint64 `json:"session_generation,omitempty"`
}

// runKey is the store's id of run id: ids of the store are shorter than
// run ids, and have no '.'.
func runKey(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:])
}

// storeCtx bounds one call of the store.
func (s *pausedDesk) storeCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), s.opts.MaxTimeout)
}

// putRun writes generation gen of run id's key, within what the owner's
// token may keep in the store (Tenant.StoreBytes), its sessions and paused
// runs together: the owner index counts them alike.
func (s *pausedDesk) putRun(id, owner string, gen uint64, sr storedRun) error {
	data, err := json.Marshal(sr)
	if err != nil {
		return err
	}
	ctx, cancel := s.storeCtx()
	defer cancel()
	meta := sessionstore.Meta{Generation: gen, Owner: owner}
	return s.runStore.PutOwned(ctx, runKey(id), meta, maxStoredRun, s.shareOf(owner).StoreBytes, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// getRun reads run id's newest generation.
func (s *pausedDesk) getRun(id string) (storedRun, sessionstore.Meta, error) {
	ctx, cancel := s.storeCtx()
	defer cancel()
	r, meta, err := s.runStore.Get(ctx, runKey(id), maxStoredRun)
	if err != nil {
		return storedRun{}, meta, err
	}
	defer r.Close()
	var sr storedRun
	data, err := io.ReadAll(r)
	if err == nil {
		err = json.Unmarshal(data, &sr)
	}
	return sr, meta, err
}

// dropRun removes run id's keys (a tombstone stays).
func (s *pausedDesk) dropRun(ids ...string) {
	for _, id := range ids {
		ctx, cancel := s.storeCtx()
		if err := s.runStore.Delete(ctx, runKey(id)); err != nil {
			s.opts.Logger.Warn("service: removing a paused run from the store", "run_id", id, "error", err)
		}
		cancel()
	}
}

// durable says whether a run that came so is kept in the store.
func (s *pausedDesk) durable(r *http.Request, req spine.Request, c clientRun) bool {
	events := wantsEvents(r)
	return s.runStore != nil && c.body == nil && c.tool == nil && len(req.Tools) == 0 &&
		(c.sess == nil || s.durableSessions() && !req.EarlyReads && !events) && !(events && req.EarlyReads)
}

// save writes the pause check made (pr.unsaved) to the store, then answers
// it; a write that lost (another replica took the run over) stops the run.
// Called without pr.mu, after check.
func (pr *pausedRun) save() {
	pr.mu.Lock()
	ev := pr.unsaved
	pr.unsaved = nil
	if ev == nil || pr.ended {
		pr.mu.Unlock()
		return
	}
	rec, gen := pr.unsavedRec, pr.gen+1
	pr.unsavedRec = nil
	sr := storedRun{RunID: pr.id, Replica: pr.s.opts.Replica, Tools: pr.tools, Limit: pr.limit, Used: pr.used,
		Record: pr.askedRecord, Call: pr.wait.Call, Pending: ev.resp.Pending, Asked: pr.approvals.last, Answered: pr.unfinished(rec), Before: pr.before}
	if len(ev.resp.Approvals) > 0 { // an approval (approvals.go)
		sr.Call, sr.Approval, sr.Entered, sr.Asked = 0, &ev.resp.Approvals[0], pr.entered, sr.Asked-1
	}
	pr.mu.Unlock()
	var err error
	switch {
	case rec == nil: // early reads started and not claimed at an approval (spine.ApprovalCall.Record)
		err = errors.New("the run has no record at this pause: it has early reads started and not claimed")
	case rec.Incomplete != "":
		err = errors.New("the run's record is incomplete (spine.Options.MaxRecord)")
	default:
		if err = pr.sessionAt(&sr); err == nil {
			sr.Run, err = rec.Encode()
		}
		if err == nil {
			err = pr.s.putRun(pr.id, pr.owner, gen, sr)
		}
	}
	pr.mu.Lock()
	defer pr.mu.Unlock()
	switch {
	case err == nil:
		pr.gen, pr.atStored = gen, true
	case errors.Is(err, sessionstore.ErrConflict):
		pr.cancel(errMoved)
		return
	default: // the run goes on in this replica's memory only
		pr.s.opts.Logger.Warn("service: a paused run is not kept in the store", "run_id", pr.id, "error", err)
	}
	switch {
	case pr.ended:
	case pr.stream != nil:
		pr.announcePause(ev.resp)
	default:
		pr.send(*ev)
	}
	if pr.s.drain.isDraining() {
		pr.handOff()
	}
}

// announcePause queues the events of a pause of a run answered as events
// (its tool_call or approval_required event), once the store has it.
// Under pr.mu.
func (pr *pausedRun) announcePause(resp Response) {
	out, errs := len(resp.Stdout), len(resp.Stderr)
	if len(resp.Approvals) > 0 {
		pr.stream.push(streamItem{approval: &resp.Approvals[0], stdout: out, stderr: errs})
		return
	}
	for _, p := range resp.Pending {
		pr.stream.push(streamItem{call: &p, stdout: out, stderr: errs})
	}
}

// streamFrom has a run taken over and answered as events send the output
// its program writes past stdout and stderr, what it wrote to its pause
// (sent on its first stream already). Under pr.mu.
func (pr *pausedRun) streamFrom(stdout, stderr string) {
	if pr.stream != nil {
		pr.stream.stdout.skipTo.Store(int64(len(stdout)))
		pr.stream.stderr.skipTo.Store(int64(len(stderr)))
	}
}

// handOff stops a paused run the store keeps, for another replica to
// continue: the drain does not wait for it. Only a run paused where the
// store holds it (atStored, for results or a decision): one at a pause
// whose write failed has an earlier pause in the store, answered already
// (what answers this pause diverges from that one); the drain waits for
// it. Under pr.mu.
func (pr *pausedRun) handOff() {
	if pr.paused && pr.atStored && !pr.ended {
		pr.cancel(errHandedOff)
	}
}

// handOffAll hands off every paused run the store keeps (Drain).
func (t *pausedRuns) handOffAll() {
	t.mu.Lock()
	runs := make([]*pausedRun, 0, len(t.runs))
	for _, pr := range t.runs {
		runs = append(runs, pr)
	}
	t.mu.Unlock()
	for _, pr := range runs {
		pr.mu.Lock()
		pr.handOff()
		pr.mu.Unlock()
	}
}

// moved reports, for a continuation of a run held here, whether another
// replica took it over since its last pause; then the run stops here.
func (pr *pausedRun) moved() bool {
	pr.mu.Lock()
	gen := pr.gen
	pr.mu.Unlock()
	if gen == 0 {
		return false
	}
	ctx, cancel := pr.s.storeCtx()
	defer cancel()
	newer, err := pr.s.runStore.Newer(ctx, runKey(pr.id), gen)
	if newer {
		pr.cancel(errMoved)
	}
	return newer && err == nil
}

// expire stops the paused run with cause, Options.ToolWait having run out;
// a kept run that another replica took over meanwhile stops as one moved
// (moved): its ids stay in the store, the claim naming its new id, and a
// session's run marks its half as not the store's (leftSession).
func (pr *pausedRun) expire(cause error) {
	if pr.durable && pr.moved() {
		return
	}
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if pr.paused && !pr.ended {
		pr.expired = true
		pr.cancel(cause)
	}
}

// refuseMoved answers a continuation of run id, held here, that another
// replica took over (moved): 409, naming the id the run continues as when
// the store says it.
func (s *pausedDesk) refuseMoved(w http.ResponseWriter, start time.Time, id, owner string) {
	if sr, meta, err := s.getRun(id); err == nil && meta.Owner == owner && sr.MovedTo != "" {
		s.movedTo(w, start, id, sr)
		return
	}
	s.refuse(w, start, http.StatusConflict, kindConflict, "another replica took the run over from the session store, and continues it")
}

// movedTo answers a continuation of run id, which the store says
// continues as sr.MovedTo: 409 naming that id (in run_id too), where a
// caller whose answer was lost (its replica died) sends the same
// continuation.
func (s *pausedDesk) movedTo(w http.ResponseWriter, start time.Time, id string, sr storedRun) {
	msg := fmt.Sprintf("run %s continues as run %s (replica %s): a continuation of it was answered already", id, sr.MovedTo, sr.Replica)
	s.metrics.errors.WithLabelValues(kindConflict).Inc()
	writeJSON(w, http.StatusConflict, Response{Value: json.RawMessage("null"), RunID: sr.MovedTo,
		Error: &Error{Kind: kindConflict, Message: msg}, Timing: Timing{TotalMS: ms(time.Since(start))}})
}

// kept says whether the run's keys stay when it ends with cause: it was
// handed off, taken over, or the server shuts down.
func kept(cause error) bool {
	return errors.Is(cause, errHandedOff) || errors.Is(cause, errMoved) || errors.Is(cause, spine.ErrClosed)
}

// continuation is what a continuation of a paused run brings: the results
// of its pending calls, or the decision on its approval (decisions set).
type continuation struct {
	results   []toolResult
	decisions []approvalDecision
}

// takeOver answers a continuation of run id, which this replica does not
// hold, from the store: false when the store does not have it either.
// Whatever it refuses for, it refuses before it claims the run: the stored
// run stays as it was.
func (s *pausedDesk) takeOver(w http.ResponseWriter, r *http.Request, start time.Time, id string, c continuation) bool {
	select { // a stored run is up to maxStoredRun, read and parsed before the continuation is checked
	case s.loading <- struct{}{}:
	default:
		w.Header().Set("Retry-After", "1")
		s.refuse(w, start, http.StatusTooManyRequests, kindOverloaded, fmt.Sprintf("run %s: this replica is loading %d other paused runs from the session store; try again", id, maxLoading))
		return true
	}
	loading := true
	loaded := func() {
		if loading {
			loading = false
			<-s.loading
		}
	}
	defer loaded()
	return s.load(w, r, start, id, c, loaded)
}

// load is takeOver once it may load run id; it calls loaded when the run
// is loaded and checked.
func (s *pausedDesk) load(w http.ResponseWriter, r *http.Request, start time.Time, id string, c continuation, loaded func()) bool {
	sr, meta, err := s.getRun(id)
	switch {
	case errors.Is(err, sessionstore.ErrNotFound) && meta.Deleted && meta.Owner == s.owner(r):
		s.refuse(w, start, http.StatusNotFound, kindNotFound, fmt.Sprintf("run %s has ended", id))
		return true
	case errors.Is(err, sessionstore.ErrNotFound) || errors.Is(err, sessionstore.ErrBadID):
		return false
	case err != nil:
		s.refuse(w, start, http.StatusServiceUnavailable, kindStoreUnavailable, fmt.Sprintf("run %s: the store could not be read: %v", id, err))
		return true
	case meta.Owner != s.owner(r):
		return false
	case sr.MovedTo != "":
		s.movedTo(w, start, id, sr)
		return true
	case c.decisions == nil && sr.Approval != nil:
		s.refuse(w, start, http.StatusConflict, kindConflict, fmt.Sprintf("run %s waits for a decision on %s (POST /v1/runs/%s/approvals), not for results", id, sr.Approval.ID, id))
		return true
	case c.decisions != nil && sr.Approval == nil:
		s.refuse(w, start, http.StatusConflict, kindConflict, fmt.Sprintf("run %s waits for the results of its pending calls, not for a decision", id))
		return true
	}
	rec, err := spine.ParseRecord(sr.Run)
	if err == nil {
		err = storedTools(sr.Tools)
	}
	if err != nil {
		s.refuse(w, start, http.StatusInternalServerError, kindInternal, fmt.Sprintf("run %s: what the store holds of it: %v", id, err))
		return true
	}
	if err := s.checkRecordOf(sr, rec); err != nil { // another build's run, say: one of that build may take it
		s.refuse(w, start, http.StatusInternalServerError, kindRunDiverged, fmt.Sprintf("run %s cannot be continued from its record on this replica: %v", id, err))
		return true
	}
	pr, refused := s.addRun(meta.Owner)
	if pr == nil {
		w.Header().Set("Retry-After", "1")
		s.refuse(w, start, http.StatusTooManyRequests, kindTooManyRuns, refused)
		return true
	}
	pr.paused = true
	var status int
	var kind, msg, what string
	if sr.Approval != nil {
		what = "decision"
		status, kind, msg = pr.checkStoredApproval(sr, c.decisions)
	} else {
		what = "results"
		for _, p := range sr.Pending {
			pr.asked[p.ID] = false
		}
		status, kind, msg = pr.checkResults(c.results)
	}
	// Loaded and checked: the run counts among the paused runs now, and
	// its session's lock may take as long as the run's time limit.
	loaded()
	var sess *fleet.Session // a session's run: its session, held as a run holds it (durablesession.go)
	if msg == "" && sr.Session != "" {
		sess, status, kind, msg = s.holdSession(r, sr, meta.Owner)
	}
	giveTurn := func() {}
	if sess != nil {
		giveTurn = func() { sess.Unlock(); s.fleet.Release(sess) }
	}
	if msg == "" {
		status, kind, msg = s.continuationSlot(w, what)
		if msg == "" && sess != nil {
			if status, kind, msg = s.atRunStart(r, sess, sr); msg != "" {
				<-s.slots
				s.metrics.inFlight.Dec()
			}
		}
	}
	if msg != "" {
		giveTurn()
		pr.abandon()
		s.refuse(w, start, status, kind, msg)
		return true
	}
	// The stored pause under the run's new id first, then the claim that
	// names it: should this replica die once the claim has replaced the
	// stored pause, and before the run's next pause, the same continuation
	// sent to the new id takes it over again elsewhere.
	again := sr
	again.RunID, again.Replica, again.Before = pr.id, s.opts.Replica, append(slices.Clip(sr.Before), id)
	if err := s.putRun(pr.id, meta.Owner, 1, again); err != nil {
		s.opts.Logger.Warn("service: a run taken over is not kept in the store until its next pause", "run_id", pr.id, "error", err)
	} else {
		pr.gen = 1
	}
	claim := storedRun{RunID: id, Replica: s.opts.Replica, MovedTo: pr.id}
	if err := s.putRun(id, meta.Owner, meta.Generation+1, claim); err != nil {
		if pr.gen > 0 {
			s.dropRun(pr.id) // the copy of a run this replica does not take
		}
		<-s.slots
		s.metrics.inFlight.Dec()
		giveTurn()
		pr.abandon()
		status, kind := http.StatusServiceUnavailable, kindStoreUnavailable
		if errors.Is(err, sessionstore.ErrConflict) {
			status, kind = http.StatusConflict, kindConflict
		}
		s.refuse(w, start, status, kind, fmt.Sprintf("run %s: another replica took it over first: %v", id, err))
		return true
	}
	s.continueRun(w, r, start, pr, sr, rec, c, sess, giveTurn)
	return true
}

// storedTools checks a stored run's tools, as its request's were; absent
// schemas, which come back from JSON as null, are absent again.
func storedTools(tools []ClientTool) error {
	for i := range tools {
		t := &tools[i]
		for _, raw := range []*json.RawMessage{&t.InputSchema, &t.Parameters, &t.OutputSchema} {
			if string(bytes.TrimSpace(*raw)) == "null" {
				*raw = nil
			}
		}
	}
	if _, err := checkClientTools(tools, nil); err != nil {
		return fmt.Errorf("its tools: %v", err)
	}
	return nil
}

// continueRun runs pr, taken over from the store as sr, from its record:
// to the stored pause, which c answers, and on; a session's run in sess,
// held until giveTurn.
func (s *pausedDesk) continueRun(w http.ResponseWriter, r *http.Request, start time.Time, pr *pausedRun, sr storedRun, rec *spine.Record, c continuation,
	sess *fleet.Session, giveTurn func()) {
	pr.tools, pr.askedRecord, pr.durable, pr.from, pr.sess = sr.Tools, sr.Record, true, sr.RunID, sess
	pr.before = append(slices.Clip(sr.Before), sr.RunID)
	pr.expect = &expectedPause{call: sr.Call, pending: sr.Pending, results: c.results, used: sr.Used, approval: sr.Approval}
	if sr.Approval != nil {
		pr.expect.decision = c.decisions[0]
	}
	for _, res := range sr.Answered {
		pr.delivered[res.ID] = res
	}
	manifest, _ := checkClientTools(sr.Tools, pr) // checked (storedTools)
	req := spine.Request{Tools: manifest, Waiting: pr.waiting, Approval: pr.approve, Record: true}
	if wantsEvents(r) && sr.Session == "" && !rec.EarlyReads {
		// Answered by the run's events from its pause on: the replay's
		// output is not sent (streamFrom) until the pause is reached. A
		// session's run, or one with early reads, is answered as JSON, as
		// the store keeps it (durable): as events, a pause would send again
		// the tool_call events of the reads still pending from the last.
		pr.stream = newRunStream(w)
		pr.stream.stdout.skipTo.Store(math.MaxInt64)
		pr.stream.stderr.skipTo.Store(math.MaxInt64)
		req.Stdout, req.Stderr = pr.stream.stdout, pr.stream.stderr
	}
	pr.mu.Lock()
	// The replay runs the program again to its pause, which its time used
	// counted already: it gets the whole limit, and the time used is the
	// stored one again once it reaches the pause (reached).
	pr.paused, pr.limit, pr.used, pr.slotHeld = false, sr.Limit, 0, true
	// The calls before the stored pause are answered from the record and
	// never reach their Call: count them as entered, or a pause after the
	// first (Started counts them) is never seen and the run waits out its
	// time limit. The approvals the record answers are not asked again:
	// the next is numbered after them.
	pr.entered, pr.approvals.base, pr.approvals.last = replayedCalls(sr), sr.Asked, sr.Asked
	if sr.Approval != nil {
		pr.entered = sr.Entered
	}
	pr.startClock()
	pr.mu.Unlock()
	target := func(ctx context.Context, req spine.Request) (*spine.Output, error) {
		return s.runner.Continue(ctx, rec, req)
	}
	if sess != nil {
		target = func(ctx context.Context, req spine.Request) (*spine.Output, error) {
			return s.fleet.Continue(ctx, sess, sr.SessionGen, rec, req)
		}
	}
	go pr.run(target, req, sess, giveTurn)
	if pr.stream != nil {
		s.streamRun(r, start, pr)
		return
	}
	s.awaitRun(w, r, start, pr)
}

// replayedCalls is how many of the run's own calls its record answers
// before the stored pause: those numbered below the first pending one.
func replayedCalls(sr storedRun) int {
	first := sr.Call
	for _, p := range sr.Pending {
		if n, err := strconv.Atoi(strings.TrimPrefix(p.ID, "call_")); err == nil && n < first {
			first = n
		}
	}
	return max(first-1, 0)
}

// expectedPause is the pause a run continued from its record must reach
// first, and the results, or the decision, that answer it.
type expectedPause struct {
	call     int
	pending  []PendingCall
	results  []toolResult
	used     time.Duration    // the run's time used at its pause
	approval *ApprovalRequest // a pause for a decision (approvals.go): reachedApproval
	decision approvalDecision
}

// reached answers the run's first pause, which must be the stored one,
// with the results its continuation brought; otherwise the run stops. Under
// pr.mu, from check.
func (pr *pausedRun) reached(pending []PendingCall) {
	e := pr.expect
	pr.expect = nil
	diff := samePause(pr.wait.Call, pending, e)
	if e.approval != nil {
		diff = fmt.Sprintf("it waits for call %d, the stored pause for a decision on %s %s(%s)", pr.wait.Call, e.approval.ID, e.approval.Tool, e.approval.Arguments)
	}
	if diff != "" {
		pr.diverged = fmt.Sprintf("run %s, continued from its record, did not reach its pause again: %s; it cannot be continued", pr.from, diff)
		pr.cancel(errDiverged)
		return
	}
	pr.stopClock() // the replay's time is not the run's: it ran that part already
	pr.used = e.used
	pr.startClock()
	pr.streamFrom(pr.wait.Stdout, pr.wait.Stderr)
	for _, res := range e.results {
		n, _ := strconv.Atoi(res.ID[len("call_"):])
		pr.asked[res.ID] = true
		pr.delivered[res.ID] = res
		if c := pr.calls[n]; c != nil {
			c.answer <- res
			delete(pr.calls, n)
		}
	}
}

var errDiverged = errors.New("the run did not reach its pause again")

// samePause names the first difference between a pause and the stored one.
func samePause(call int, pending []PendingCall, e *expectedPause) string {
	if call != e.call || len(pending) != len(e.pending) {
		return fmt.Sprintf("it waits for call %d with %d pending, the stored pause for call %d with %d", call, len(pending), e.call, len(e.pending))
	}
	for i, p := range pending {
		q := e.pending[i]
		if p.ID != q.ID || p.Name != q.Name || !sameJSON(p.Arguments, q.Arguments) {
			return fmt.Sprintf("it asks %s %s(%s), the stored pause %s %s(%s)", p.ID, p.Name, p.Arguments, q.ID, q.Name, q.Arguments)
		}
	}
	return ""
}

// sameJSON compares two JSON texts as compacted (the store keeps them so).
func sameJSON(a, b json.RawMessage) bool {
	var ca, cb bytes.Buffer
	return json.Compact(&ca, a) == nil && json.Compact(&cb, b) == nil && bytes.Equal(ca.Bytes(), cb.Bytes())
}

// unfinished keeps, of the results the run had, those of calls rec lists
// as not finished where the run waited: with early reads, a call the
// caller answered at an earlier pause whose Call had not yet returned when
// the program began to wait (its response is not on the record), which a
// continuation asks for again and the store answers. The others are
// forgotten. Under pr.mu.
func (pr *pausedRun) unfinished(rec *spine.Record) []toolResult {
	if rec == nil { // a pause not kept (unclaimed early reads at an approval): the next may need them all
		return nil
	}
	var kept []toolResult
	if rec.Waiting != nil {
		for _, c := range rec.Waiting.Pending {
			if res, ok := pr.delivered[callID(c.N)]; ok && c.N > 0 && c.Response == nil {
				kept = append(kept, res)
			}
		}
	}
	clear(pr.delivered)
	for _, res := range kept {
		pr.delivered[res.ID] = res
	}
	return kept
}
