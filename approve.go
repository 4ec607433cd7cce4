package spine

import (
	"context"
	"encoding/json"
	"fmt"
)

// ApproveFunc decides whether a tool call may run: nil lets it, an error
// refuses it, and the program's call raises PermissionError with the error's
// message. args are the call's arguments as JSON (read-only); early says the
// call is an early read the Host is about to start before the program
// reaches it (docs/observability.md: a refused early read is not started,
// and the program's call, if it comes, asks again). It runs on the Guest's
// goroutine: while it runs the program waits, and ctx ends with the run.
type ApproveFunc func(ctx context.Context, tool string, args json.RawMessage, early bool) error

// refusedError is a call Options.Approve refused: the program sees
// PermissionError.
type refusedError struct{ msg string }

func (e *refusedError) Error() string { return e.msg }

// approve asks Options.Approve about request. A hook that panics refuses.
func (st *runState) approve(ctx context.Context, request callRequest, early bool) (err error) {
	hook := st.runner.opts.Approve
	if hook == nil {
		return nil
	}
	defer func() {
		if p := recover(); p != nil {
			err = &refusedError{fmt.Sprintf("the approval hook panicked: %v", p)}
		}
	}()
	if err := hook(ctx, request.Tool, request.Args, early); err != nil {
		msg := err.Error()
		if msg == "" {
			msg = "tool call refused"
		}
		return &refusedError{msg}
	}
	return nil
}
