package service

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/codemode"
	"github.com/spine-run/spine/fleet"
	"github.com/spine-run/spine/mcpclient"
)

// A run whose request declares "tools" (client tools, answered by the
// caller) pauses when its program waits for one of them: the request that
// started it, or the one that sent the last results, is answered with
// status "tool_calls" and every call pending, and POST
// /v1/runs/{run_id}/tool_results sends their results. While paused, a run
// holds its Guest (and its session's turn) but no run slot, and its time
// limit does not run; Options.ToolWait bounds the pause, Options.MaxPaused
// how many such runs there are.

// ClientTool is one entry of a run request's "tools": a tool the caller
// answers. InputSchema and Parameters are the same thing under the two
// names the model APIs use; give one.
type ClientTool struct {
	Name         string          `json:"name"`
	Description  string          `json:"description"`
	InputSchema  json.RawMessage `json:"input_schema"`
	Parameters   json.RawMessage `json:"parameters"`
	OutputSchema json.RawMessage `json:"output_schema"`
	ReadOnly     bool            `json:"read_only"` // early reads may call it (spine.ToolSpec.AllowEarlyRead)
}

// toolResult is one entry of tool_results' "results".
type toolResult struct {
	ID    string          `json:"id"`
	Value json.RawMessage `json:"value"`
	Error *struct {
		Message string `json:"message"`
		Type    string `json:"type"`
	} `json:"error"`
}

// DefaultToolWait is the default of Options.ToolWait.
const DefaultToolWait = 5 * time.Minute

// Status values of a run with client tools.
const (
	statusToolCalls = "tool_calls"
	statusDone      = "done"
	kindToolWait    = "tool_wait"
	kindTooManyRuns = "too_many_paused"
)

var (
	errToolWait = errors.New("the caller did not send the tool results in time")
	errRunLimit = errors.New("the run's time limit")
	errGone     = errors.New("the client went away")
)

// checkClientTools refuses a bad "tools" list and returns it as the run's
// own tools, each Call asking pr (nil: only the check).
func checkClientTools(tools []ClientTool, pr *pausedRun) (spine.Manifest, error) {
	m := make(spine.Manifest, len(tools))
	for i, t := range tools {
		if err := spine.ValidName(t.Name); err != nil {
			return nil, fmt.Errorf("tools[%d]: %v", i, err)
		}
		if _, dup := m[t.Name]; dup {
			return nil, fmt.Errorf("tools[%d]: %q is declared twice", i, t.Name)
		}
		schema := t.InputSchema
		if len(t.Parameters) > 0 {
			if len(schema) > 0 {
				return nil, fmt.Errorf(`tools[%d] (%s): give "input_schema" or "parameters", not both`, i, t.Name)
			}
			schema = t.Parameters
		}
		for what, s := range map[string]json.RawMessage{"input_schema": schema, "output_schema": t.OutputSchema} {
			if s = bytes.TrimSpace(s); len(s) > 0 && s[0] != '{' {
				return nil, fmt.Errorf("tools[%d] (%s): %s must be a JSON Schema object", i, t.Name, what)
			}
		}
		if len(bytes.TrimSpace(t.OutputSchema)) == 0 {
			t.OutputSchema = nil
		}
		m[t.Name] = spine.ToolSpec{Call: pr.call(t.Name), AllowEarlyRead: t.ReadOnly, Description: t.Description,
			InputSchema: schema, OutputSchema: t.OutputSchema}
	}
	return m, nil
}

// runEvent is what a request waiting on a run answers: a pause or the end.
type runEvent struct {
	status int
	resp   Response
	answer *ToolAnswer // for a run of POST /v1/tool/call: written in place of resp
}

// write answers w with ev.
func (ev runEvent) write(w http.ResponseWriter, start time.Time) {
	if ev.answer != nil {
		writeJSON(w, ev.status, ev.answer)
		return
	}
	ev.resp.Timing.TotalMS = ms(time.Since(start))
	writeJSON(w, ev.status, ev.resp)
}

// clientCall is a call of a client tool that reached its Call.
type clientCall struct {
	n      int
	name   string
	args   json.RawMessage
	answer chan toolResult
}

func callID(n int) string { return "call_" + strconv.Itoa(n) }

// pausedRun is a run with client tools.
type pausedRun struct {
	s      *pausedDesk
	id     string
	owner  string
	ctx    context.Context
	cancel context.CancelCauseFunc
	events chan runEvent
	// finished is closed when the run has ended and given back what it
	// held; cancel is set, and the run started, before the run is in
	// pausedRuns' reach with it.
	finished chan struct{}
	stream   *runStream     // the run is answered as events (pausedstream.go); else nil
	body     *streamBody    // prefix mode: the program as it streams in; else nil
	tool     *codemode.Tool // a run of POST /v1/tool/call, answered as it answers (pausedtool.go); else nil
	fileData fileData       // its ?file_data= (tooldata.go)

	mu       sync.Mutex
	calls    map[int]*clientCall // reached their Call, not answered
	asked    map[string]bool     // ids a pause listed: true once answered
	entered  int                 // calls that reached their Call
	wait     spine.ToolWait      // the last Request.Waiting
	paused   bool                // a pause was sent; its results have not come
	expired  bool                // Options.ToolWait ran out while paused
	ended    bool
	final    runEvent // when ended
	slotHeld bool
	streamed bool          // holds one of the stream slots too (prefix mode, until it pauses or ends)
	limit    time.Duration // the run's time limit, of its own running only
	used     time.Duration
	since    time.Time
	clock    *time.Timer // the time limit while running
	waitEnd  *time.Timer // Options.ToolWait while paused

	approvals approvals // calls deferred to the caller's approval (approvals.go)

	// A run kept in the store (durable.go).
	durable     bool
	tools       []ClientTool          // its "tools"
	askedRecord bool                  // its caller asked for its record
	gen         uint64                // the generation of its key it wrote last; 0: none
	atStored    bool                  // it waits at the pause that generation holds
	unsaved     *runEvent             // a pause check or pauseFor made, which save writes, then answers
	unsavedRec  *spine.Record         // the record at that pause
	delivered   map[string]toolResult // results it had that its next stored pause may need (unfinished)
	expect      *expectedPause        // taken over: the pause it must reach first
	from        string                // taken over: the run id it continues
	sess        *fleet.Session        // a session's run: its session (durablesession.go)
	before      []string              // taken over: its earlier ids, from last (storedRun.Before)
	diverged    string                // why it did not reach that pause
}

// call is client tool name's Call: it registers the call and waits for its
// result.
func (pr *pausedRun) call(name string) spine.Tool {
	return func(ctx context.Context, args json.RawMessage) (any, error) {
		c := &clientCall{n: spine.ToolCallOf(ctx), name: name, args: args, answer: make(chan toolResult, 1)}
		pr.mu.Lock()
		if res, ok := pr.delivered[callID(c.n)]; ok {
			// Answered already, taken up again by a continuation (durable.go),
			// and counted as entered there (replayedCalls).
			c.answer <- res
		} else {
			pr.entered++
			pr.calls[c.n] = c
		}
		if pr.stream != nil && !pr.durable { // a kept run's after the store has its pause (save)
			pr.announce(c)
		}
		pr.check()
		pr.mu.Unlock()
		pr.save()
		select {
		case res := <-c.answer:
			if res.Error != nil {
				msg := res.Error.Message
				if res.Error.Type != "" {
					msg = res.Error.Type + ": " + msg
				}
				return nil, errors.New(msg)
			}
			return res.Value, nil
		case <-ctx.Done():
			pr.mu.Lock()
			delete(pr.calls, c.n)
			pr.mu.Unlock()
			return nil, ctx.Err()
		}
	}
}

// waiting is the run's Request.Waiting.
func (pr *pausedRun) waiting(w spine.ToolWait) {
	pr.mu.Lock()
	pr.wait = w
	pr.check()
	pr.mu.Unlock()
	pr.save()
}

// check pauses the run when its program waits for a client call and every
// call it started has reached its Call: the pending calls are all it can
// ask before an answer. Under pr.mu.
func (pr *pausedRun) check() {
	if pr.paused || pr.ended || pr.wait.Call == 0 || pr.entered < pr.wait.Started || pr.calls[pr.wait.Call] == nil {
		return
	}
	if pr.expect != nil { // taken over: the stored pause, answered already
		pr.reached(pr.pending())
		return
	}
	pr.paused = true
	pr.stopClock()
	pr.freeSlot()
	pr.waitEnd = time.AfterFunc(pr.s.opts.ToolWait, func() { pr.expire(errToolWait) })
	if pr.stream != nil && !pr.durable {
		return // every pending call was a tool_call event as it reached its Call
	}
	resp := Response{Value: json.RawMessage("null"), Status: statusToolCalls, RunID: pr.id, Stdout: pr.wait.Stdout, Stderr: pr.wait.Stderr}
	resp.Pending = pr.pending()
	for _, p := range resp.Pending {
		pr.asked[p.ID] = false
	}
	ev := runEvent{status: http.StatusOK, resp: resp}
	if pr.tool != nil {
		ev.answer = &ToolAnswer{Status: resp.Status, RunID: resp.RunID, Pending: resp.Pending}
	}
	if pr.durable {
		pr.unsaved, pr.unsavedRec, pr.atStored = &ev, pr.wait.Record, false // save writes it to the store, then answers it
		return
	}
	pr.send(ev)
}

// pending lists the calls that reached their Call, unanswered, in their
// order. Under pr.mu.
func (pr *pausedRun) pending() []PendingCall {
	nums := make([]int, 0, len(pr.calls))
	for n := range pr.calls {
		nums = append(nums, n)
	}
	sort.Ints(nums)
	pending := make([]PendingCall, 0, len(nums))
	for _, n := range nums {
		c := pr.calls[n]
		pending = append(pending, PendingCall{ID: callID(n), Name: c.name, Arguments: c.args})
	}
	return pending
}

// send hands ev to the request waiting on the run, in place of one nobody
// read; for a run answered as events, ev is the end, the stream's last.
// Under pr.mu.
func (pr *pausedRun) send(ev runEvent) {
	if pr.stream != nil {
		pr.stream.push(streamItem{})
		return
	}
	select {
	case <-pr.events:
	default:
	}
	pr.events <- ev
}

// startClock and stopClock count the run's own running against its limit.
// Under pr.mu.
func (pr *pausedRun) startClock() {
	pr.since = time.Now()
	pr.clock = time.AfterFunc(pr.limit-pr.used, func() { pr.cancel(errRunLimit) })
}

func (pr *pausedRun) stopClock() {
	if pr.clock != nil {
		pr.clock.Stop()
		pr.used += time.Since(pr.since)
		pr.clock = nil
	}
}

// freeSlot gives the run's slot back, and its stream slot: a paused stream
// has its whole program, and continues as any run. Under pr.mu.
func (pr *pausedRun) freeSlot() {
	if pr.slotHeld {
		pr.slotHeld = false
		<-pr.s.slots
		pr.s.metrics.inFlight.Dec()
	}
	if pr.streamed {
		pr.streamed = false
		<-pr.s.streams
		pr.s.metrics.streamsInFlight.Dec()
	}
}

// clientRun is how a run with client tools came: the tools, the session to
// run in (nil: a Guest of the pool), the streamed program of prefix mode
// (nil: a JSON request), and run_python's Tool for POST /v1/tool/call,
// whose answers are the model's (nil: a run's answers).
type clientRun struct {
	tools []ClientTool
	sess  *fleet.Session
	body  *streamBody
	tool  *codemode.Tool

	remote *mcpclient.RemoteTools // the request's mcp_servers' tools (mcpservers.go), closed when the run ends
	data   fileData               // run_python's ?file_data= (tooldata.go)
}

// runClient runs req, whose request declared tools: it takes the session's
// turn and a slot, starts the run and answers with its first pause or its
// end, or, for a request that asked for events, with the run's events to
// its end. It reports whether the run keeps the session (it releases it
// when it ends).
func (s *pausedDesk) runClient(w http.ResponseWriter, r *http.Request, start time.Time, req spine.Request, c clientRun) (kept bool) {
	sess, body := c.sess, c.body
	started := false
	defer func() {
		if !started {
			closeRemote(c.remote)
		}
	}()
	// Before the cap: a bad list is 400 whatever the load, and before any
	// event, a name of the server's tools too.
	if err := s.checkTools(c.tools); err != nil {
		s.refuseClient(w, start, c.tool, http.StatusBadRequest, kindBadRequest, err.Error())
		return false
	}
	pr, refused := s.addRun(s.owner(r))
	if pr == nil {
		w.Header().Set("Retry-After", "1")
		s.refuseClient(w, start, c.tool, http.StatusTooManyRequests, kindTooManyRuns, refused)
		return false
	}
	pr.tool, pr.fileData = c.tool, c.data
	if s.durable(r, req, c) { // kept in the store (durable.go)
		pr.durable, pr.tools, pr.askedRecord, pr.sess = true, c.tools, req.Record, sess
		req.Record = true
	}
	manifest, _ := checkClientTools(c.tools, pr)
	maps.Copy(manifest, req.Tools) // of the request's mcp_servers (mcpservers.go)
	req.Tools, req.Waiting, req.Approval = manifest, pr.waiting, pr.approve
	if c.tool != nil {
		req.Approval = approvalRefused // run_python's answers are the model's
	}
	pr.limit = req.Timeout
	req.Timeout = 0
	target := s.runner.Run
	giveTurn := func() {}
	if sess != nil {
		lockCtx, cancel := context.WithTimeout(r.Context(), pr.limit)
		err := sess.Lock(lockCtx)
		cancel()
		if err != nil {
			pr.abandon()
			s.sessions.sessionFailed(w, r, start, opRun, sess, err)
			return false
		}
		giveTurn = func() { sess.Unlock(); s.fleet.Release(sess) }
		target = func(ctx context.Context, req spine.Request) (*spine.Output, error) {
			return s.fleet.Run(ctx, sess, req)
		}
	}
	if !s.admitClient(w, start, c) {
		pr.abandon()
		return false
	}
	s.metrics.inFlight.Inc()
	if body != nil {
		s.metrics.streamsInFlight.Inc()
		w.Header().Del("Connection") // the run reads the body
	}
	pr.body = body
	if wantsEvents(r) && c.tool == nil { // run_python's answers are JSON only
		if body != nil {
			_ = http.NewResponseController(w).EnableFullDuplex() // events while the program arrives
		}
		pr.stream = newRunStream(w)
		req.Stdout, req.Stderr = pr.stream.stdout, pr.stream.stderr
	}
	pr.mu.Lock()
	pr.slotHeld, pr.streamed = true, body != nil
	pr.startClock()
	pr.mu.Unlock()
	started = true
	go pr.run(target, req, sess, func() { giveTurn(); closeRemote(c.remote) })
	if pr.stream != nil {
		s.streamRun(r, start, pr)
	} else {
		s.awaitRun(w, r, start, pr)
	}
	return sess != nil
}

// abandon takes out of the table a run that never started.
func (pr *pausedRun) abandon() {
	pr.cancel(nil)
	pr.s.paused.ended(pr, 0)
	close(pr.finished)
}

// run runs the program and hands its end to whoever waits.
func (pr *pausedRun) run(target func(context.Context, spine.Request) (*spine.Output, error), req spine.Request, sess *fleet.Session, giveTurn func()) {
	s := pr.s
	defer close(pr.finished)
	runStart := time.Now()
	out, err := target(pr.ctx, req)
	if pr.body != nil {
		pr.body.finish() // how reading ended is known before the run is judged
	}
	status, e := http.StatusOK, (*Error)(nil)
	switch cause := context.Cause(pr.ctx); {
	case pr.body != nil && (pr.body.idled() || errors.As(pr.body.failure(), new(*http.MaxBytesError))):
		// Before the cause: the read that failed also ended the request.
		status, e = classify(context.Background(), pr.limit, err, pr.body)
	case errors.Is(cause, errToolWait):
		status, e = http.StatusRequestTimeout, &Error{Kind: kindToolWait, Message: fmt.Sprintf("the caller did not send the tool results within %v (--tool-wait); the run was stopped", s.opts.ToolWait)}
	case errors.Is(cause, errApprovalWait):
		status, e = http.StatusRequestTimeout, &Error{Kind: kindToolWait, Message: fmt.Sprintf("the caller did not decide the approval within %v (--tool-wait); the run was stopped", s.opts.ToolWait)}
	case errors.Is(cause, errRunLimit):
		status, e = http.StatusRequestTimeout, &Error{Kind: kindTimeout, Message: timeoutMessage(pr.limit)}
	case errors.Is(cause, spine.ErrClosed):
		status, e = http.StatusServiceUnavailable, &Error{Kind: kindClosed, Message: "the server is shutting down"}
	case errors.Is(cause, errHandedOff):
		status, e = http.StatusServiceUnavailable, &Error{Kind: kindClosed, Message: "the server is shutting down; the run is kept in the session store: send the same results again, and another replica continues it"}
	case errors.Is(cause, errMoved):
		status, e = http.StatusConflict, &Error{Kind: kindConflict, Message: "another replica took the run over from the session store, and continues it"}
	case errors.Is(cause, errDiverged):
		status, e = http.StatusInternalServerError, &Error{Kind: kindRunDiverged, Message: pr.diverged}
	case pr.from != "" && errors.Is(err, spine.ErrDiverged):
		status, e = http.StatusInternalServerError, &Error{Kind: kindRunDiverged, Message: fmt.Sprintf("run %s cannot be continued from its record on this replica: %v", pr.from, err)}
	case errors.Is(err, fleet.ErrMovedOn):
		status, e = http.StatusConflict, &Error{Kind: kindConflict, Message: fmt.Sprintf("run %s cannot continue: %v", pr.from, err)}
	case errors.Is(cause, errGone):
		status, e = statusClientClosed, &Error{Kind: kindCanceled, Message: "the client went away; the run was stopped"}
	case err != nil:
		status, e = classify(context.Background(), pr.limit, err, pr.body)
	}
	if sess != nil && e != nil {
		status, e = s.sessions.sessionRunError(context.Background(), sess, err, status, e)
	}
	pr.mu.Lock()
	pr.ended = true
	pr.stopClock()
	if pr.waitEnd != nil {
		pr.waitEnd.Stop()
	}
	pr.freeSlot()
	pr.mu.Unlock()
	pr.cancel(nil)
	pr.leftSession(context.Cause(pr.ctx))
	giveTurn()
	outcome := "ok"
	if e != nil {
		outcome = e.Kind
		s.metrics.errors.WithLabelValues(e.Kind).Inc()
	}
	s.metrics.runs.WithLabelValues(outcome).Inc()
	s.metrics.duration.WithLabelValues(outcome).Observe(time.Since(runStart).Seconds())
	resp := Response{Error: e, Status: statusDone, RunID: pr.id, Timing: Timing{RunMS: ms(pr.used)}}
	resp.SetOutput(out)
	if pr.durable && !pr.askedRecord {
		resp.Record = nil // recorded for the store, not for the caller
	}
	if out != nil {
		s.metrics.toolCalls.Add(float64(out.ToolCalls))
	}
	if resp.Value == nil {
		resp.Value = json.RawMessage("null")
	}
	pr.mu.Lock()
	pr.final = runEvent{status: status, resp: resp}
	if pr.tool != nil {
		pr.final.status, pr.final.answer = pr.toolEnd(status, e, out, err)
	}
	pr.mu.Unlock()
	keep := time.Duration(0)
	if e != nil && e.Kind == kindToolWait {
		keep = max(s.opts.ToolWait, time.Minute) // a late continuation learns what happened
	}
	// Out of the table and the store before the end is answered: a caller
	// that has it finds no run there any more.
	if pr.durable && !kept(context.Cause(pr.ctx)) {
		pr.mu.Lock()
		ids := []string{}
		if pr.gen > 0 {
			ids = append(ids, pr.id)
		}
		ids = append(ids, pr.before...) // the claims naming its later ids
		pr.mu.Unlock()
		s.dropRun(ids...)
	}
	s.paused.ended(pr, keep)
	pr.mu.Lock()
	pr.send(pr.final)
	pr.mu.Unlock()
}

// awaitRun answers r with pr's next pause or its end; a client that goes
// away first stops the run. A request the Server cut (Cut: its grace ran
// out) stops the run as a Server that closes does, which the store keeps
// for another replica, and is answered so (503 closed).
func (s *pausedDesk) awaitRun(w http.ResponseWriter, r *http.Request, start time.Time, pr *pausedRun) {
	select {
	case ev := <-pr.events:
		ev.write(w, start)
	case <-r.Context().Done():
		if s.drain.cutDone() {
			pr.cancel(spine.ErrClosed)
			ev := <-pr.events
			ev.write(w, start)
			return
		}
		pr.cancel(errGone)
		if pr.body != nil {
			<-pr.finished // the run reads the body, which is the handler's
		}
	}
}

// handleToolResults is POST /v1/runs/{run_id}/tool_results: the results of
// every call the run's last pause listed.
func (s *pausedDesk) handleToolResults(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	var body struct {
		Results []toolResult `json:"results"`
	}
	if err := decodeBody(w, r, s.opts.MaxBody, &body); err != nil {
		s.bodyRefused(w, start, err)
		return
	}
	pr := s.paused.get(r.PathValue("run_id"), s.owner(r))
	if pr == nil && s.runStore != nil && s.takeOver(w, r, start, r.PathValue("run_id"), continuation{results: body.Results}) {
		return
	}
	if pr != nil && pr.durable && pr.moved() {
		s.refuseMoved(w, start, pr.id, pr.owner)
		return
	}
	if pr == nil {
		status, kind, msg := s.runIDs.whyNot(r.PathValue("run_id"))
		s.refuse(w, start, status, kind, msg)
		return
	}
	pr.mu.Lock()
	if pr.answeredEnd(w, start) {
		return
	}
	status, kind, msg := pr.checkResults(body.Results)
	// The run goes on when the call it waits for is answered: with every
	// result of its pause, or, for a run answered as events, with the
	// result of that call, whatever else comes.
	resume := msg == "" && (pr.stream == nil || pr.paused && answers(body.Results, callID(pr.wait.Call)))
	if resume {
		status, kind, msg = s.continuationSlot(w, "results")
	}
	if msg != "" {
		pr.mu.Unlock()
		s.refuse(w, start, status, kind, msg)
		return
	}
	if resume {
		pr.paused, pr.slotHeld, pr.wait, pr.atStored = false, true, spine.ToolWait{}, false
		pr.waitEnd.Stop()
		pr.startClock()
	}
	for _, res := range body.Results {
		n, _ := strconv.Atoi(res.ID[len("call_"):])
		pr.asked[res.ID] = true
		if pr.durable {
			pr.delivered[res.ID] = res
		}
		if c := pr.calls[n]; c != nil {
			c.answer <- res
			delete(pr.calls, n)
		}
	}
	pr.mu.Unlock()
	if pr.stream != nil {
		writeJSON(w, http.StatusAccepted, ResultsAccepted{RunID: pr.id, Accepted: len(body.Results)})
		return
	}
	s.awaitRun(w, r, start, pr)
}

// checkResults says what is wrong with results for pr's pause: a status,
// an error kind and a message, or "" when nothing is. Under pr.mu.
func (pr *pausedRun) checkResults(results []toolResult) (int, string, string) {
	if pr.expired {
		return http.StatusRequestTimeout, kindToolWait, fmt.Sprintf("the results came after %v (--tool-wait): the run was stopped", pr.s.opts.ToolWait)
	}
	if !pr.paused && pr.stream == nil {
		return http.StatusConflict, kindConflict, "the run is not waiting for results: another request is continuing it"
	}
	if len(results) == 0 {
		return http.StatusBadRequest, kindBadRequest, `"results" is missing or empty`
	}
	seen := map[string]bool{}
	for i, res := range results {
		answered, asked := pr.asked[res.ID]
		switch {
		case !asked:
			return http.StatusBadRequest, kindBadRequest, fmt.Sprintf("results[%d]: the run has no pending call %q", i, res.ID)
		case answered:
			return http.StatusConflict, kindConflict, fmt.Sprintf("results[%d]: call %q was answered already", i, res.ID)
		case seen[res.ID]:
			return http.StatusBadRequest, kindBadRequest, fmt.Sprintf("results[%d]: call %q is answered twice", i, res.ID)
		case (res.Error == nil) == (len(res.Value) == 0):
			return http.StatusBadRequest, kindBadRequest, fmt.Sprintf(`results[%d] (%s): give "value" or "error", one of them`, i, res.ID)
		case res.Error != nil && res.Error.Message == "":
			return http.StatusBadRequest, kindBadRequest, fmt.Sprintf(`results[%d] (%s): "error" needs a "message"`, i, res.ID)
		}
		seen[res.ID] = true
	}
	if pr.stream != nil {
		return 0, "", "" // results as they come: each call is its own
	}
	var missing []string
	for id, answered := range pr.asked {
		if !answered && !seen[id] {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return http.StatusBadRequest, kindBadRequest, fmt.Sprintf("results must answer every pending call: missing %v", missing)
	}
	return 0, "", ""
}
