package spine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
)

// ApproveFunc decides whether a tool call may run: nil lets it, an error
// refuses it, and the program's call raises PermissionError with the error's
// message. ErrAsk, or an error wrapping it, defers the decision to a
// person: the run asks Request.Approval and waits for its answer (a run
// without one refuses the call, saying so); a deferred early read is not
// started, as a refused one. args are the call's arguments as JSON
// (read-only), in the canonical form the tool then gets: escapes resolved, each object's keys in
// the program's order, no key repeated and no two keys that differ only in
// case (a call with either is refused before the hook is asked: Go's
// encoding/json would give a struct's field "key" the value of "KEY"). early says the call is an early read the Host
// is about to start before the program reaches it (docs/observability.md: a
// refused early read is not started, and the program's call, if it comes,
// asks again). It runs on the Guest's goroutine: while it runs the program waits, and ctx ends with the run.
type ApproveFunc func(ctx context.Context, tool string, args json.RawMessage, early bool) error

// ErrAsk, returned by an ApproveFunc (or wrapped: its message is then the
// reason the person is shown), defers a call's approval to a person: the
// run waits in the call, holding its Guest, until Request.Approval decides.
var ErrAsk = errors.New("the call needs a person's approval")

// ApprovalFunc decides a call that Options.Approve deferred (ErrAsk), by
// asking a person: nil allows the call, an error refuses it and the
// program's call raises PermissionError with the error's message. It runs on
// the run's goroutine, which waits for it: it may take as long as the
// person does, within the run's ctx and time limit, and should return when
// ctx ends.
type ApprovalFunc func(ctx context.Context, call ApprovalCall) error

// ApprovalCall is a call waiting for a person's approval, as
// Request.Approval is told.
type ApprovalCall struct {
	// N numbers the run's deferred calls: 1, 2, … in the order the program
	// made them.
	N int
	// Tool and Args are the call, Args in the canonical form Options.Approve
	// judged and the tool gets (read-only).
	Tool string
	Args json.RawMessage
	// Reason is the message of the error Options.Approve deferred with.
	Reason string
	// Stdout and Stderr are the program's output so far, as Output has them
	// (within Options.MaxOutput).
	Stdout, Stderr string
	// Record is the run's record so far, when it is recorded
	// (Request.Record): everything up to this call, the call not included,
	// without an Outcome. Runner.Continue carries the run on from it, in
	// this process or another, to this same call, which the
	// continuation's Request.Approval is asked about again, not
	// Options.Approve (Record.Asking: a person's decision stands whatever
	// that Runner's hook says); the calls the record holds are answered
	// from it, neither asked about nor made again. Its N counts the calls
	// deferred since the continuation began. It is nil when the
	// run has calls started and not claimed (early reads): a continuation
	// from the record would not take them up, and would make or ask them
	// again.
	Record *Record
}

// refusedError is a call Options.Approve refused: the program sees
// PermissionError.
type refusedError struct{ msg string }

func (e *refusedError) Error() string { return e.msg }

// approve asks Options.Approve about request and returns the arguments the
// tool is to get: with a hook, the canonical form of request.Args (escapes
// resolved, canonicalArgs), which is what the hook judged; without one,
// request.Args as they came. Arguments with no canonical form (a key
// repeated) and a hook that panics refuse.
func (st *runState) approve(ctx context.Context, request callRequest, early bool) (args json.RawMessage, err error) {
	if a := st.replay.asking(); a != nil && !early { // a continuation at its record's end (Record.Asking)
		return st.askAgain(ctx, request, a)
	}
	hook := st.runner.opts.Approve
	if hook == nil {
		return request.Args, nil
	}
	args, err = canonicalArgs(request.Args)
	if err != nil {
		return nil, &refusedError{"tool call refused: " + err.Error()}
	}
	defer func() {
		if p := recover(); p != nil {
			args, err = nil, &refusedError{fmt.Sprintf("the approval hook panicked: %v", p)}
		}
	}()
	err = hook(ctx, request.Tool, args, early)
	if errors.Is(err, ErrAsk) {
		if early {
			return nil, &refusedError{"an early read is not started while its approval is deferred"}
		}
		err = st.ask(ctx, request.Tool, args, err)
	}
	if err != nil {
		msg := err.Error()
		if msg == "" {
			msg = "tool call refused"
		}
		return nil, &refusedError{msg}
	}
	return args, nil
}

// ask hands a call Options.Approve deferred (reason wraps ErrAsk) to
// Request.Approval and waits for its decision. A run without
// Request.Approval refuses it, saying why.
func (st *runState) ask(ctx context.Context, tool string, args json.RawMessage, reason error) error {
	if st.approval == nil {
		return fmt.Errorf("tool call refused: %v, and this run has no one to ask (Request.Approval is unset)", reason)
	}
	st.asked++
	call := ApprovalCall{N: st.asked, Tool: tool, Args: args, Reason: reason.Error()}
	if st.output != nil {
		call.Stdout, call.Stderr, _, _ = st.output()
	}
	st.mu.Lock()
	unclaimed := len(st.futures) > 0
	st.mu.Unlock()
	if st.rec != nil && !unclaimed {
		call.Record = st.rec.snapshot()
		call.Record.Asking = &RecordAsking{Tool: tool, Args: args, Reason: call.Reason}
	}
	return st.approval(ctx, call) // a panic is the hook's: approve recovers it
}

// askAgain asks Request.Approval about the call a continuation's record
// waited in for a decision (Record.Asking), which must be the program's
// first call past the record, without asking Options.Approve.
func (st *runState) askAgain(ctx context.Context, request callRequest, a *RecordAsking) (json.RawMessage, error) {
	args, err := canonicalArgs(request.Args)
	if err != nil || request.Tool != a.Tool || !sameArgs(args, a.Args) {
		st.replay.diverge("the record waits for a decision on %s; the program called %s", showCall(a.Tool, a.Args), showCall(request.Tool, request.Args))
		return nil, &refusedError{"the run did not reach the call its record waits in"}
	}
	if err := st.ask(ctx, request.Tool, args, errors.New(a.Reason)); err != nil {
		msg := err.Error()
		if msg == "" {
			msg = "tool call refused"
		}
		return nil, &refusedError{msg}
	}
	return args, nil
}
