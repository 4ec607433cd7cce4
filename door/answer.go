package door

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/spine-run/spine"
)

// Response is the body of every answer of service.Server's /v1/run and
// /v1/run/stream, and what spine run --json prints (with a few fields of its
// own): the same program gets the same answer from both. A request a front
// door refuses (Require, RefuseWhileDraining) is answered with one
// too, its Value null.
type Response struct {
	Value            json.RawMessage  `json:"value"`                        // null when the run failed, or when the value has no faithful JSON form
	Display          spine.Display    `json:"display,omitempty"`            // the value as a notebook shows it (Output.Display)
	Displayed        []spine.Display  `json:"displayed,omitempty"`          // what the program passed to display(), in order
	DisplayedLeftOut int              `json:"displayed_left_out,omitempty"` // displays left out past the result limit
	Stdout           string           `json:"stdout"`
	Stderr           string           `json:"stderr"`
	StdoutTruncated  bool             `json:"stdout_truncated,omitempty"`
	StderrTruncated  bool             `json:"stderr_truncated,omitempty"`
	ToolCalls        int              `json:"tool_calls"`
	Calls            []spine.ToolCall `json:"calls,omitempty"`          // each call the program made (Output.Calls)
	Files            []spine.File     `json:"files,omitempty"`          // what the program left in its working directory, data in base64
	FilesLeftOut     int              `json:"files_left_out,omitempty"` // files left out of Files by the caps on files
	Error            *Error           `json:"error"`                    // null on success
	Timing           Timing           `json:"timing"`
	Record           *spine.Record    `json:"record,omitempty"` // the run's record, when the request asked for it

	// A run whose request declared "tools" (service's client tools) says
	// where it is: Status "tool_calls" (paused: Pending are the calls to
	// answer, Stdout and Stderr the output so far; the other fields are
	// empty) or "done" (ended: the answer as without tools). RunID names it
	// to POST /v1/runs/{run_id}/tool_results.
	//
	// A run a call of which waits for its caller's approval (the Runner's
	// Options.Approve deferred it) says so with Status "approval_required":
	// Approvals are the calls to decide, by POST
	// /v1/runs/{run_id}/approvals.
	Status    string            `json:"status,omitempty"`
	RunID     string            `json:"run_id,omitempty"`
	Pending   []PendingCall     `json:"pending,omitempty"`
	Approvals []ApprovalRequest `json:"approvals,omitempty"`
}

// Error says why a run failed or was refused.
type Error struct {
	// Kind is one of python, timeout, too_large, bad_request, overloaded,
	// canceled, guest, closed, internal, unauthorized, read_timeout (a /v1/run
	// body that did not arrive in time), stream_idle (a stream that sent nothing
	// for service.Options.StreamIdle), forbidden (a Host that is not loopback on
	// a server without a token, or a browser's cross-origin request),
	// unsupported_media_type (a body of the wrong Content-Type); for sessions,
	// not_found (no such session for this token: never made, deleted or
	// expired), session_gone (a run before left it broken: delete it),
	// bad_snapshot (a blob Restore refuses; a session holding files open, which
	// cannot be snapshotted) and too_many_sessions; with
	// service.Options.SessionStore, conflict (409: another replica stored the
	// session's run first, or a restore under another token's id),
	// store_unavailable (503), other_image (503: a session stored by another
	// Guest build; header Spine-Snapshot-Image names it) and stored_snapshot
	// (500: its stored snapshot cannot be restored here); for client tools
	// (service's paused runs), tool_wait (408: the caller did not send results
	// within service.Options.ToolWait), too_many_paused (429:
	// service.Options.MaxPaused) and conflict (409: a result twice, or for a run
	// another request continues).
	Kind string `json:"kind"`
	// Type, Line and Traceback are set for a Python error: the exception's
	// class, the line of the program it points to (0 when unknown) and the
	// formatted traceback.
	Type      string `json:"type"`
	Message   string `json:"message"`
	Line      int    `json:"line"`
	Traceback string `json:"traceback"`
}

// Timing is where the time of a request went, in milliseconds.
type Timing struct {
	TotalMS float64 `json:"total_ms"`           // from the handler's start to the answer
	RunMS   float64 `json:"run_ms"`             // inside Runner.Run (for a stream, reading it included)
	SetupMS float64 `json:"setup_ms,omitempty"` // spine run only: loading the tools and starting the sandbox
}

// SetOutput fills r with what a run left: its output, its tool calls, its
// files, its displays and, when it succeeded (r.Error is nil), its value and
// the value's display. out may be nil (the run did not start).
func (r *Response) SetOutput(out *spine.Output) {
	if out == nil {
		return
	}
	r.Stdout, r.Stderr = out.Stdout, out.Stderr
	r.StdoutTruncated, r.StderrTruncated = out.StdoutTruncated, out.StderrTruncated
	r.ToolCalls = out.ToolCalls
	r.Calls = out.Calls
	r.Files, r.FilesLeftOut = out.Files, out.FilesLeftOut
	r.Displayed, r.DisplayedLeftOut = out.Displayed, out.DisplayedLeftOut
	r.Record = out.Record
	if r.Error == nil {
		r.Value, r.Display = out.Value, out.Display
	}
}

// ErrorOf is the Error of a run that ended with err, nil for success: a
// Python error's exception, else the kind of its spine.Outcome and its text.
// limit is the run's time limit, which a time-out's message names.
func ErrorOf(err error, limit time.Duration) *Error {
	if err == nil {
		return nil
	}
	var pyErr *spine.PythonError
	if errors.As(err, &pyErr) {
		return &Error{Kind: KindPython, Type: pyErr.Type, Message: pyErr.Message, Line: pyErr.Line, Traceback: pyErr.Traceback}
	}
	outcome := spine.Classify(err)
	e := &Error{Kind: string(outcome), Message: err.Error()}
	switch outcome {
	case spine.OutcomeTimeout:
		e.Message = TimeoutMessage(limit)
	case spine.OutcomeClosed:
		e.Message = "the server is shutting down"
	}
	return e
}

// TimeoutMessage is the message of a run stopped at its time limit.
func TimeoutMessage(limit time.Duration) string {
	return fmt.Sprintf("the run did not finish within its time limit of %v", limit)
}

// PendingCall is a call of a client tool the program waits for: the caller
// answers it by ID.
type PendingCall struct {
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

// ApprovalRequest is a call waiting for its caller's approval: the caller
// allows or refuses it by ID. Reason is why it needs one, as the Runner's
// Options.Approve said.
type ApprovalRequest struct {
	ID        string          `json:"id"`
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments"`
	Reason    string          `json:"reason"`
}

// The error kinds a front door's own answers have (Error.Kind); service
// has the rest.
const (
	KindPython       = "python"
	KindClosed       = "closed"
	KindUnauthorized = "unauthorized"
)

// WriteJSON answers with status and v as one line of JSON (HTML's
// characters as they are), and notes a Response's error kind for the
// access log (NoteAnswer).
func WriteJSON(w http.ResponseWriter, status int, v any) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)            // one line, ending in a newline
	enc.SetEscapeHTML(false)              // tracebacks show <agent>, not \u003cagent\u003e
	if err := enc.Encode(v); err != nil { // Output.Value is valid JSON: never
		status = http.StatusInternalServerError
		b.Reset()
		b.WriteString(`{"value":null,"error":{"kind":"internal","message":"encoding the answer failed"}}` + "\n")
	}
	if resp, ok := v.(Response); ok && resp.Error != nil {
		NoteAnswer(w, status, resp.Error.Kind)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	w.Write(b.Bytes())
}

func ms(d time.Duration) float64 {
	return float64(d.Microseconds()) / 1000
}
