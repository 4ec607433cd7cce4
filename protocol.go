package spine

import (
	"encoding/json"

	"github.com/spine-run/spine/internal/abi"
)

// The JSON messages that cross to the Guest besides the bridge's (bridge.go):
// what the Host asks of the Guest's execute and prefix_begin exports.

// executeRequest is the request of execute: run a program (docs/abi.md).
type executeRequest struct {
	Source      string          `json:"source"`
	Filename    string          `json:"filename,omitempty"`
	Inputs      json.RawMessage `json:"inputs"`
	Tools       json.RawMessage `json:"tools,omitempty"`       // omitted: the Guest's image has them installed
	ExtraTools  json.RawMessage `json:"extra_tools,omitempty"` // the run's own tools (Request.Tools), installed for it alone
	LazyTools   json.RawMessage `json:"lazy_tools,omitempty"`  // those of them given by name alone (guestRunTools)
	EarlyReads  bool            `json:"early_reads"`
	Transformed bool            `json:"transformed,omitempty"`
	Prefix      bool            `json:"prefix,omitempty"`
	Session     bool            `json:"session,omitempty"` // run in the session's namespace, kept from run to run
	ResultLimit int             `json:"result_limit"`
}

// prefixBeginRequest is the request of prefix_begin: a program is about to
// stream in (prefix mode).
type prefixBeginRequest struct {
	Inputs     json.RawMessage `json:"inputs"`
	Tools      json.RawMessage `json:"tools,omitempty"`
	ExtraTools json.RawMessage `json:"extra_tools,omitempty"`
	EarlyReads bool            `json:"early_reads"`
	Session    bool            `json:"session,omitempty"` // tools rebound in the session's namespace are not early
}

// executeResponse is execute's answer: the program's value, or its error, and
// the rewritten program when the request asked for it.
type executeResponse struct {
	Value            json.RawMessage `json:"value"`
	Error            *PythonError    `json:"error"`
	Transformed      string          `json:"transformed"`
	Display          Display         `json:"display"`
	Displayed        []Display       `json:"displayed"`
	DisplayedLeftOut int             `json:"displayed_left_out"`
}

// maxErrorResponse is room in an execute response for an error's message and
// traceback, which the Guest cuts to abi.MaxErrorText characters each, with
// their escapes.
const maxErrorResponse = 4 * abi.MaxErrorText

// maxResponse is the largest execute response the Host accepts under o;
// transformed says the request asked for the rewritten program. The value,
// its display and the displays (display()) may each take MaxResult.
func (o *Options) maxResponse(transformed bool) int {
	n := 3*o.MaxResult + maxErrorResponse
	if transformed {
		n += 2 * o.MaxSource // the rewritten source, JSON-escaped
	}
	return n
}
