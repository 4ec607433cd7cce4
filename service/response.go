package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/door"
)

// The answer of every run and of every refused request, and how a run's
// error is told in it (door.ErrorOf), are package door's, which spine mcp
// --http and spine run --json share with the Server; these aliases keep
// the names the HTTP API's Go clients have used.
type (
	Response        = door.Response
	Error           = door.Error
	Timing          = door.Timing
	PendingCall     = door.PendingCall
	ApprovalRequest = door.ApprovalRequest
)

// The error kinds, also the label values of spine_errors_total.
const (
	kindPython     = door.KindPython
	kindTimeout    = "timeout"
	kindTooLarge   = "too_large"
	kindBadRequest = "bad_request"
	kindOverloaded = "overloaded"
	kindCanceled   = "canceled"
	kindGuest      = "guest"
	kindClosed     = door.KindClosed
	kindInternal   = "internal"

	kindUnauthorized = door.KindUnauthorized
	kindReadTimeout  = "read_timeout"
	kindStreamIdle   = "stream_idle"

	kindForbidden            = "forbidden"
	kindUnsupportedMediaType = "unsupported_media_type"

	kindNotFound        = "not_found"
	kindSessionGone     = string(spine.OutcomeSessionGone)
	kindBadSnapshot     = string(spine.OutcomeBadSnapshot)
	kindTooManySessions = string(spine.OutcomeTooManySessions)
)

// statusClientClosed is the answer (nobody reads it) when the client went
// away before its run ended: nginx's 499.
const statusClientClosed = 499

// classify maps Run's error to a status and an Error (nil for success). ctx
// is the run's context, limit its time limit.
func classify(ctx context.Context, limit time.Duration, err error, body *streamBody) (int, *Error) {
	if err == nil {
		return http.StatusOK, nil
	}
	if errors.As(err, new(*spine.PythonError)) {
		return http.StatusUnprocessableEntity, door.ErrorOf(err, limit)
	}
	// The Runner keeps only the text of a failed read: ask the body.
	var (
		readErr error
		idle    time.Duration
	)
	if body != nil {
		readErr = body.failure()
		if body.idled() {
			idle = body.idle
		}
	}
	var tooBig *http.MaxBytesError
	switch {
	case idle > 0: // before the context: the failed read canceled it
		return http.StatusRequestTimeout, &Error{Kind: kindStreamIdle, Message: fmt.Sprintf("the stream sent nothing for %v, the server's idle limit for streams; the run was stopped", idle)}
	case errors.As(readErr, &tooBig):
		return http.StatusRequestEntityTooLarge, &Error{Kind: kindTooLarge, Message: fmt.Sprintf("the streamed program is over the %d-byte limit", tooBig.Limit)}
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return http.StatusRequestTimeout, &Error{Kind: kindTimeout, Message: door.TimeoutMessage(limit)}
	case ctx.Err() != nil:
		return statusClientClosed, &Error{Kind: kindCanceled, Message: "the client went away; the run was stopped"}
	case readErr != nil:
		return statusClientClosed, &Error{Kind: kindCanceled, Message: "reading the program failed: " + readErr.Error()}
	}
	return outcomeStatus[spine.Classify(err)], door.ErrorOf(err, limit)
}

// outcomeStatus is the HTTP status of each way a run can end.
var outcomeStatus = map[spine.Outcome]int{
	spine.OutcomeOK:         http.StatusOK,
	spine.OutcomePython:     http.StatusUnprocessableEntity,
	spine.OutcomeBadRequest: http.StatusBadRequest,
	spine.OutcomeTooLarge:   http.StatusRequestEntityTooLarge,
	spine.OutcomeTimeout:    http.StatusRequestTimeout,
	spine.OutcomeCanceled:   statusClientClosed,
	spine.OutcomeClosed:     http.StatusServiceUnavailable,
	spine.OutcomeGuest:      http.StatusInternalServerError,

	// A session closed (deleted, expired) is 404, as an unknown id, before
	// its outcome is looked up here: what is left is a lost session.
	spine.OutcomeSessionGone:     http.StatusGone,
	spine.OutcomeBadSnapshot:     http.StatusBadRequest,
	spine.OutcomeTooManySessions: http.StatusServiceUnavailable,
}

// refuse answers a request that never ran.
func (s *Server) refuse(w http.ResponseWriter, start time.Time, status int, kind, message string) {
	s.metrics.errors.WithLabelValues(kind).Inc()
	s.opts.Logger.Debug("refused", "status", status, "kind", kind, "error", message)
	writeJSON(w, status, Response{
		Value:  json.RawMessage("null"),
		Error:  &Error{Kind: kind, Message: message},
		Timing: Timing{TotalMS: ms(time.Since(start))},
	})
}

// The names the Server's files use for door's helpers.
func writeJSON(w http.ResponseWriter, status int, v any)        { door.WriteJSON(w, status, v) }
func noteAnswer(w http.ResponseWriter, status int, kind string) { door.NoteAnswer(w, status, kind) }
func timeoutMessage(limit time.Duration) string                 { return door.TimeoutMessage(limit) }
func closeConn(w http.ResponseWriter)                           { door.CloseConn(w) }

func ms(d time.Duration) float64 {
	return float64(d.Microseconds()) / 1000
}
