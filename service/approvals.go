package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/spine-run/spine"
)

// Approvals that wait. On a Server whose Runner has Options.Approve, every
// run of /v1/run, /v1/run/stream and a session's run may pause as a run with
// client tools does (paused.go), and is answered as one (status "done" and
// a run_id at its end): a call Approve defers to a person (spine.ErrAsk)
// pauses it, the request waiting on it answered with status
// "approval_required" and the call, or, for a run answered as events, an
// approval_required event. POST /v1/runs/{run_id}/approvals allows or
// refuses the call ({"approvals": [{"id", "allow", "reason"}]}); a refusal
// raises PermissionError in the program with the reason. While it waits,
// the run holds its Guest (and its session's turn) but no run slot, and
// its time limit does not run; Options.ToolWait bounds the wait, as a
// client tool's. A run kept in the store (durable.go) writes its record
// at the approval as at a client tool's pause, and a decision that reaches
// another replica takes it over there.

// statusApproval is the status of a run paused for its caller's approval.
const statusApproval = "approval_required"

// errApprovalWait is the cause of a run stopped because its caller did not
// decide within Options.ToolWait.
var errApprovalWait = errors.New("the caller did not decide the approval in time")

// approvals are a run's calls deferred to its caller. Under the run's mu.
type approvals struct {
	pending *approvalCall // the call the program waits in; nil: none
	last    int           // the number of the last call asked
	base    int           // taken over: the approvals its record answers (spine.ApprovalCall.N counts from there)
}

// approvalCall is a call waiting for its caller's decision.
type approvalCall struct {
	call    spine.ApprovalCall
	decided chan approvalDecision
}

// approvalDecision is one entry of approvals' "approvals".
type approvalDecision struct {
	ID     string `json:"id"`
	Allow  *bool  `json:"allow"`
	Reason string `json:"reason"`
}

func approvalID(n int) string { return "approval_" + strconv.Itoa(n) }

// asksApproval reports whether the Server's runs may wait for approvals:
// its Runner has Options.Approve, which may defer a call.
func (s *pausedDesk) asksApproval() bool { return s.runner.Options().Approve != nil }

// approvalRefused is Request.Approval of a run whose answers cannot pause
// for a decision (POST /v1/tool/call's, which are the model's): the call
// is refused, saying why.
func approvalRefused(_ context.Context, call spine.ApprovalCall) error {
	return fmt.Errorf("tool call refused: %s, and a run of POST /v1/tool/call cannot wait for a person (a run of POST /v1/run can)", call.Reason)
}

// approve is the run's Request.Approval: it pauses the run for its
// caller's decision on call and waits for it.
func (pr *pausedRun) approve(ctx context.Context, call spine.ApprovalCall) error {
	a := &approvalCall{call: call, decided: make(chan approvalDecision, 1)}
	pr.mu.Lock()
	a.call.N += pr.approvals.base
	if pr.expect != nil { // taken over at this approval, decided already (durable.go)
		d, ok := pr.reachedApproval(a.call)
		pr.mu.Unlock()
		if !ok {
			return errDiverged // the run stops
		}
		return d.err()
	}
	pr.approvals.pending, pr.approvals.last = a, a.call.N
	pr.pauseFor(a)
	pr.mu.Unlock()
	pr.save()
	select {
	case d := <-a.decided:
		return d.err()
	case <-ctx.Done():
		pr.mu.Lock()
		pr.approvals.pending = nil
		pr.mu.Unlock()
		return ctx.Err()
	}
}

// err is what the call's approval returns for d: nil when it allows.
func (d approvalDecision) err() error {
	switch {
	case *d.Allow:
		return nil
	case d.Reason == "":
		return errors.New("the caller refused the call")
	}
	return errors.New(d.Reason)
}

// pauseFor pauses the run for a's decision: its clock and slot stop, and
// the caller learns of the call. Under pr.mu.
func (pr *pausedRun) pauseFor(a *approvalCall) {
	pr.paused, pr.atStored = true, false // until save has the store hold this pause
	pr.stopClock()
	pr.freeSlot()
	pr.waitEnd = time.AfterFunc(pr.s.opts.ToolWait, func() { pr.expire(errApprovalWait) })
	req := ApprovalRequest{ID: approvalID(a.call.N), Tool: a.call.Tool, Arguments: a.call.Args, Reason: a.call.Reason}
	if pr.stream != nil && !pr.durable { // a kept run's after the store has its pause (save)
		pr.stream.push(streamItem{approval: &req, stdout: len(a.call.Stdout), stderr: len(a.call.Stderr)})
		return
	}
	ev := runEvent{status: http.StatusOK, resp: Response{Value: json.RawMessage("null"), Status: statusApproval, RunID: pr.id,
		Stdout: a.call.Stdout, Stderr: a.call.Stderr, Approvals: []ApprovalRequest{req}}}
	if pr.durable {
		pr.unsaved, pr.unsavedRec = &ev, a.call.Record // save writes it to the store, then answers it
		return
	}
	pr.send(ev)
}

// handleApprovals is POST /v1/runs/{run_id}/approvals: the caller's
// decision on the call the run waits in.
func (s *pausedDesk) handleApprovals(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	var body struct {
		Approvals []approvalDecision `json:"approvals"`
	}
	if err := decodeBody(w, r, s.opts.MaxBody, &body); err != nil {
		s.bodyRefused(w, start, err)
		return
	}
	pr := s.paused.get(r.PathValue("run_id"), s.owner(r))
	if pr == nil && s.runStore != nil && s.takeOver(w, r, start, r.PathValue("run_id"), continuation{decisions: body.Approvals}) {
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
	status, kind, msg := pr.checkApprovals(body.Approvals)
	if msg == "" {
		status, kind, msg = s.continuationSlot(w, "decision")
	}
	if msg != "" {
		pr.mu.Unlock()
		s.refuse(w, start, status, kind, msg)
		return
	}
	a := pr.approvals.pending
	pr.approvals.pending = nil
	pr.paused, pr.slotHeld, pr.atStored = false, true, false
	pr.waitEnd.Stop()
	pr.startClock()
	a.decided <- body.Approvals[0]
	pr.mu.Unlock()
	if pr.stream != nil {
		writeJSON(w, http.StatusAccepted, ResultsAccepted{RunID: pr.id, Accepted: 1})
		return
	}
	s.awaitRun(w, r, start, pr)
}

// checkApprovals says what is wrong with decisions for pr's pending
// approval: a status, an error kind and a message, or "" when nothing is.
// Under pr.mu.
func (pr *pausedRun) checkApprovals(decisions []approvalDecision) (int, string, string) {
	if pr.expired {
		return http.StatusRequestTimeout, kindToolWait, fmt.Sprintf("the decision came after %v (--tool-wait): the run was stopped", pr.s.opts.ToolWait)
	}
	if len(decisions) == 0 {
		return http.StatusBadRequest, kindBadRequest, `"approvals" is missing or empty`
	}
	pending := 0
	if pr.approvals.pending != nil {
		pending = pr.approvals.pending.call.N
	}
	for i, d := range decisions {
		digits, ok := strings.CutPrefix(d.ID, "approval_")
		n, err := strconv.Atoi(digits)
		switch {
		case !ok || err != nil || n < 1 || n > pr.approvals.last || approvalID(n) != d.ID:
			return http.StatusBadRequest, kindBadRequest, fmt.Sprintf("approvals[%d]: the run has asked for no approval %q", i, d.ID)
		case i > 0 && d.ID == decisions[0].ID:
			return http.StatusBadRequest, kindBadRequest, fmt.Sprintf("approvals[%d]: %q is decided twice", i, d.ID)
		case n != pending:
			return http.StatusConflict, kindConflict, fmt.Sprintf("approvals[%d]: %q was decided already", i, d.ID)
		case d.Allow == nil:
			return http.StatusBadRequest, kindBadRequest, fmt.Sprintf(`approvals[%d] (%s): "allow" must be true or false`, i, d.ID)
		}
	}
	return 0, "", "" // one entry: a run waits for one decision at a time
}

// checkStoredApproval checks decisions for the approval sr, a run taken
// over from the store, waits for, as checkApprovals does for a run held
// here. Under pr.mu or before the run starts.
func (pr *pausedRun) checkStoredApproval(sr storedRun, decisions []approvalDecision) (int, string, string) {
	n := sr.Asked + 1
	if sr.Approval.ID != approvalID(n) {
		return http.StatusInternalServerError, kindInternal, fmt.Sprintf("run %s: the store holds approval %q, its %dth", sr.RunID, sr.Approval.ID, n)
	}
	pr.approvals.pending, pr.approvals.last = &approvalCall{call: spine.ApprovalCall{N: n}}, n
	defer func() { pr.approvals.pending = nil }()
	return pr.checkApprovals(decisions)
}

// reachedApproval answers the first approval a run taken over asks, which
// must be its stored pause's, with the decision its continuation brought;
// otherwise the run stops (false). Under pr.mu.
func (pr *pausedRun) reachedApproval(call spine.ApprovalCall) (approvalDecision, bool) {
	e := pr.expect
	pr.expect = nil
	id := approvalID(call.N)
	switch {
	case e.approval == nil:
		pr.diverged = fmt.Sprintf("it asks %s %s(%s), the stored pause waits for call %d", id, call.Tool, call.Args, e.call)
	case e.approval.ID != id || e.approval.Tool != call.Tool || !sameJSON(e.approval.Arguments, call.Args):
		pr.diverged = fmt.Sprintf("it asks %s %s(%s), the stored pause %s %s(%s)", id, call.Tool, call.Args, e.approval.ID, e.approval.Tool, e.approval.Arguments)
	}
	if pr.diverged != "" {
		pr.diverged = fmt.Sprintf("run %s, continued from its record, did not reach its pause again: %s; it cannot be continued", pr.from, pr.diverged)
		pr.cancel(errDiverged)
		return approvalDecision{}, false
	}
	pr.stopClock() // the replay's time is not the run's: it ran that part already
	pr.used = e.used
	pr.startClock()
	pr.streamFrom(call.Stdout, call.Stderr)
	pr.approvals.last = call.N
	return e.decision, true
}
