package spine

import (
	"context"
	"encoding/json"
	"fmt"
)

// ApproveFunc decides whether a tool call may run: nil lets it, an error
// refuses it, and the program's call raises PermissionError with the error's
// message. args are the call's arguments as JSON (read-only), in the
// canonical form the tool then gets: escapes resolved, each object's keys in
// the program's order, no key repeated and no two keys that differ only in
// case (a call with either is refused before the hook is asked: Go's
// encoding/json would give a struct's field "key" the value of "KEY"). early says the call is an early read the Host
// is about to start before the program reaches it (docs/observability.md: a
// refused early read is not started, and the program's call, if it comes,
// asks again). It runs on the Guest's goroutine: while it runs the program waits, and ctx ends with the run.
type ApproveFunc func(ctx context.Context, tool string, args json.RawMessage, early bool) error

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
	if err := hook(ctx, request.Tool, args, early); err != nil {
		msg := err.Error()
		if msg == "" {
			msg = "tool call refused"
		}
		return nil, &refusedError{msg}
	}
	return args, nil
}
