package service

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/codemode"
)

// ToolDefinition is the body of GET /v1/tool: run_python as an agent
// declares it to its model, in any language.
type ToolDefinition struct {
	Name         string          `json:"name"`
	Description  string          `json:"description"`
	InputSchema  json.RawMessage `json:"input_schema"`
	OutputSchema json.RawMessage `json:"output_schema"`
}

// ToolAnswer is the body of every answer of POST /v1/tool/call: Text is what
// the model reads, IsError whether to mark the tool result as an error (the
// Anthropic API's is_error, MCP's isError), Result the run's fields (null
// when the call did not run).
//
// Images and Files come only when asked for, with the query parameter
// file_data: "images" gives Images, the images of Result.Images with their
// data, which the agent sends its model after Text (codemode.Image says in
// what shape for each API); "all" gives Files too, every file the program
// left, with its data. Both are base64 in the JSON. Asked for, they are []
// when there are none; absent when the call did not run.
type ToolAnswer struct {
	Text    string           `json:"text"`
	IsError bool             `json:"is_error"`
	Result  *codemode.Result `json:"result"`
	Images  []ToolImage      `json:"images,omitzero"` // [] when asked for and none
	Files   []spine.File     `json:"files,omitzero"`

	// A call that brought client tools (pausedtool.go) says where its run
	// is, as a run's Response does: Status "tool_calls" (paused: answer
	// Pending at POST /v1/runs/{run_id}/tool_results) or "done".
	Status  string        `json:"status,omitempty"`
	RunID   string        `json:"run_id,omitempty"`
	Pending []PendingCall `json:"pending,omitempty"`
}

func (s *Server) handleTool(w http.ResponseWriter, r *http.Request) {
	t := s.opts.Tool
	writeJSON(w, http.StatusOK, ToolDefinition{Name: t.Name(), Description: t.Description(), InputSchema: t.InputSchema(), OutputSchema: t.OutputSchema()})
}

// handleToolCall runs one run_python call: the body is the arguments as the
// model sent them. Every outcome the model should read — its program's
// error, a limit, bad arguments — is 200 with IsError set: the agent sends
// Text back whatever happened. Only what the model cannot act on has
// another status: 413 a body over MaxBody, 408 a body that did not arrive,
// 429 every slot busy (Retry-After; the text says "busy, retry" too), 499
// the client went away, 503 the Runner closed.
func (s *Server) handleToolCall(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	tool := s.opts.Tool
	data, err := fileDataOf(r)
	if err != nil {
		s.refuse(w, start, http.StatusBadRequest, kindBadRequest, err.Error())
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.opts.MaxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		switch {
		case errors.As(err, &tooBig):
			s.refuse(w, start, http.StatusRequestEntityTooLarge, kindTooLarge, fmt.Sprintf("the request body is over the %d-byte limit", tooBig.Limit))
		case errors.Is(err, os.ErrDeadlineExceeded):
			s.refuse(w, start, http.StatusRequestTimeout, kindReadTimeout, "the request body did not arrive within the server's read timeout")
		default:
			s.refuse(w, start, statusClientClosed, kindCanceled, "reading the request body failed: "+err.Error())
		}
		return
	}
	req, _, err := tool.Request(body)
	if err != nil {
		s.metrics.errors.WithLabelValues(kindBadRequest).Inc()
		s.answerTool(w, http.StatusOK, codemode.Failed(err.Error()))
		return
	}
	if tools, err := clientToolsSetting(r); err != nil || len(tools) > 0 { // the caller's, not the model's
		if err != nil {
			s.desk.refuseClient(w, start, tool, http.StatusBadRequest, kindBadRequest, err.Error())
			return
		}
		s.desk.runClient(w, r, start, req, clientRun{tools: tools, tool: tool, data: data})
		return
	}
	select {
	case s.slots <- struct{}{}:
	default:
		s.metrics.errors.WithLabelValues(kindOverloaded).Inc()
		w.Header().Set("Retry-After", "1")
		s.answerTool(w, http.StatusTooManyRequests, codemode.Failed(fmt.Sprintf("busy, retry: all %d run slots are busy; call %s again in a moment", cap(s.slots), tool.Name())))
		return
	}
	s.metrics.inFlight.Inc()
	runStart := time.Now()
	req.Approval = approvalRefused
	out, runErr := s.runner.Run(r.Context(), req)
	runTime := time.Since(runStart)
	<-s.slots
	s.metrics.inFlight.Dec()

	outcome := spine.Classify(runErr)
	kind := string(outcome)
	if outcome == spine.OutcomeOK {
		kind = "ok"
	} else {
		s.metrics.errors.WithLabelValues(kind).Inc()
	}
	s.metrics.runs.WithLabelValues(kind).Inc()
	s.metrics.duration.WithLabelValues(kind).Observe(runTime.Seconds())
	if out != nil {
		s.metrics.toolCalls.Add(float64(out.ToolCalls))
	}
	if outcome == spine.OutcomeGuest {
		s.opts.Logger.Error("tool call failed", "kind", kind, "error", runErr.Error())
	}
	res, err := tool.Answer(r.Context(), out, runErr)
	switch {
	case err == nil:
		s.answerToolData(w, http.StatusOK, res, data)
	case errors.Is(err, spine.ErrClosed) || s.drain.cutDone():
		s.answerTool(w, http.StatusServiceUnavailable, codemode.Failed("the server is shutting down"))
	default: // the client went away: nobody reads this
		s.answerTool(w, statusClientClosed, codemode.Failed("the client went away; the run was stopped"))
	}
}

func (s *Server) answerTool(w http.ResponseWriter, status int, res *codemode.Result) {
	s.answerToolData(w, status, res, fileDataNone)
}

func toolAnswer(res *codemode.Result) ToolAnswer {
	a := ToolAnswer{Text: res.Text(), IsError: res.IsError}
	if res.Output != nil || !res.IsError {
		a.Result = res
	}
	return a
}
