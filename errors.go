package spine

import (
	"context"
	"errors"
	"fmt"

	"github.com/spine-run/spine/internal/engine"
)

// PythonError is a run that ended with an uncaught Python exception (a
// SyntaxError included). Match it with errors.As.
type PythonError struct {
	Type      string // the exception's class name, e.g. "RuntimeError"
	Message   string // str() of the exception
	Line      int    // line in the program's source, 0 when unknown
	Traceback string // formatted, with frames from the program's source only
}

func (e *PythonError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s: %s (line %d)", e.Type, e.Message, e.Line)
	}
	return fmt.Sprintf("%s: %s", e.Type, e.Message)
}

var (
	// ErrClosed is returned by Run after Close.
	ErrClosed = errors.New("spine: runner closed")

	// ErrBadRequest wraps every error for a Request that cannot run as it
	// is: a Source and a Stream (or neither), inputs that are not a JSON
	// object or nest deeper than MaxInputDepth.
	ErrBadRequest = errors.New("spine: bad request")

	// ErrTooLarge wraps every error for a source, inputs or result past its limit.
	ErrTooLarge = errors.New("spine: too large")

	// ErrGuest wraps every failure of the Guest outside Python that its
	// program cannot be blamed for: a trap (an out-of-bounds access), or a
	// broken response. The Runner stays usable; the Guest that failed is
	// discarded.
	ErrGuest = engine.ErrGuest

	// ErrArtifact wraps every problem with the Guest artifact found by New.
	ErrArtifact = engine.ErrArtifact

	// ErrDiverged wraps the error of a replay (Runner.Replay) whose program
	// asked for something else than its record holds: another tool, other
	// arguments, another order, more clock reads or random bytes; or whose
	// record is of another Guest build. The error names the first difference.
	ErrDiverged = errors.New("spine: replay diverged from its record")
)

// Outcome is how a run ended, in the one classification that the CLI, the
// HTTP service and the MCP server all turn into their exit code, status or
// tool error. Its values are the service's error kinds.
type Outcome string

const (
	OutcomeOK         Outcome = "ok"
	OutcomePython     Outcome = "python"      // a *PythonError: the program failed
	OutcomeBadRequest Outcome = "bad_request" // ErrBadRequest: the request cannot run
	OutcomeTooLarge   Outcome = "too_large"   // ErrTooLarge: a source, inputs or result over its limit
	OutcomeTimeout    Outcome = "timeout"     // the run's time limit (context.DeadlineExceeded)
	OutcomeCanceled   Outcome = "canceled"    // stopped from outside: its context canceled, its stream failed
	OutcomeClosed     Outcome = "closed"      // ErrClosed: the Runner is closing
	OutcomeGuest      Outcome = "guest"       // the Guest failed (ErrGuest), or anything else

	OutcomeSessionGone     Outcome = "session_gone"      // ErrSessionClosed or ErrSessionLost: the session cannot run
	OutcomeBadSnapshot     Outcome = "bad_snapshot"      // ErrSnapshot, ErrSnapshotMismatch, ErrSessionState
	OutcomeTooManySessions Outcome = "too_many_sessions" // ErrTooManySessions
)

// Classify returns the Outcome of the error Run returned (nil: OutcomeOK).
func Classify(err error) Outcome {
	var pyErr *PythonError
	var readErr *streamReadError
	switch {
	case err == nil:
		return OutcomeOK
	case errors.As(err, &pyErr):
		return OutcomePython
	case errors.Is(err, ErrBadRequest), errors.Is(err, ErrDiverged):
		return OutcomeBadRequest
	case errors.Is(err, ErrTooLarge):
		return OutcomeTooLarge
	case errors.Is(err, ErrClosed):
		return OutcomeClosed
	case errors.Is(err, ErrSessionClosed), errors.Is(err, ErrSessionLost):
		return OutcomeSessionGone
	case errors.Is(err, ErrSnapshot), errors.Is(err, ErrSnapshotMismatch), errors.Is(err, ErrSessionState):
		return OutcomeBadSnapshot
	case errors.Is(err, ErrTooManySessions):
		return OutcomeTooManySessions
	case errors.Is(err, context.DeadlineExceeded):
		return OutcomeTimeout
	case errors.Is(err, context.Canceled), errors.As(err, &readErr):
		return OutcomeCanceled
	}
	return OutcomeGuest
}
