package spine

import (
	"errors"
	"fmt"
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

	// ErrGuest wraps every failure of the Guest outside Python: a trap (stack
	// overflow, out-of-bounds access), an exit, or a broken response. The
	// Runner stays usable; the instance that failed is discarded.
	ErrGuest = errors.New("spine: guest failed")

	// ErrArtifact wraps every problem with the Guest artifact found by New.
	ErrArtifact = errors.New("spine: bad guest artifact")
)
