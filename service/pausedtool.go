package service

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/codemode"
)

// Client tools on run_python's endpoints. POST /v1/tool/call takes the
// caller's tools in its tools setting (the tools query parameter, else the
// Spine-Tools header: its body is the model's arguments, as they are); its
// run pauses as /v1/run's does, the pause and the end being ToolAnswers:
// the pause with Status "tool_calls", RunID and Pending, the end with the
// model's Text as without client tools, Status "done" and RunID. POST
// /v1/tool describes run_python for a given tool list ({"tools": [...]}):
// a GET with a body is not one that proxies and clients keep.

// clientToolsSetting is a request's tools setting: the tools query
// parameter, else the Spine-Tools header; nil when neither is there.
func clientToolsSetting(r *http.Request) ([]ClientTool, error) {
	v := r.Header.Get("Spine-Tools")
	if query := r.URL.Query(); query.Has("tools") {
		v = query.Get("tools")
	}
	if v == "" {
		return nil, nil
	}
	var tools []ClientTool
	if err := decodeTools(v, &tools); err != nil {
		return nil, fmt.Errorf("tools: %v", err)
	}
	return tools, nil
}

// checkTools refuses a bad tools list, or one naming a tool of the
// server's, with the reason.
func (s *pausedDesk) checkTools(tools []ClientTool) error {
	checked, err := checkClientTools(tools, nil)
	if err == nil {
		err = s.runner.CheckTools(checked)
	}
	if err != nil {
		return errors.New(strings.TrimPrefix(err.Error(), "spine: bad request: "))
	}
	return nil
}

// refuseClient refuses a run with client tools before it starts: as any
// request, or with a ToolAnswer for POST /v1/tool/call (tool not nil).
func (s *pausedDesk) refuseClient(w http.ResponseWriter, start time.Time, tool *codemode.Tool, status int, kind, message string) {
	if tool == nil {
		s.refuse(w, start, status, kind, message)
		return
	}
	s.metrics.errors.WithLabelValues(kind).Inc()
	s.answerTool(w, status, codemode.Failed(message))
}

// admitClient takes a run slot for c's run, and a stream slot for a stream,
// or refuses it (429) and gives its session's turn back.
func (s *pausedDesk) admitClient(w http.ResponseWriter, start time.Time, c clientRun) bool {
	if c.tool == nil {
		return s.admit(w, start, c.body != nil, func() {
			if c.sess != nil {
				c.sess.Unlock()
			}
		})
	}
	select {
	case s.slots <- struct{}{}:
		return true
	default:
		w.Header().Set("Retry-After", "1")
		s.refuseClient(w, start, c.tool, http.StatusTooManyRequests, kindOverloaded, fmt.Sprintf("busy, retry: all %d run slots are busy; call %s again in a moment", cap(s.slots), c.tool.Name()))
		return false
	}
}

// toolEnd is the end of a run of POST /v1/tool/call as the model reads it,
// and its status: 200 for every outcome the model can act on (its time
// limit included), else the run's own (408 tool_wait, 499, 503).
func (pr *pausedRun) toolEnd(status int, e *Error, out *spine.Output, err error) (int, *ToolAnswer) {
	var res *codemode.Result
	switch {
	case e != nil && e.Kind == kindTimeout: // the run's clock, not a context's deadline
		res, _ = pr.tool.Answer(context.Background(), out, fmt.Errorf("spine: run stopped: %w", context.DeadlineExceeded))
		status = http.StatusOK
	case e != nil && (e.Kind == kindToolWait || e.Kind == kindClosed || e.Kind == kindCanceled):
		res = codemode.Failed(e.Message)
	default:
		var answerErr error
		if res, answerErr = pr.tool.Answer(context.Background(), out, err); answerErr != nil {
			status, res = http.StatusServiceUnavailable, codemode.Failed("the server is shutting down")
		} else {
			status = http.StatusOK
		}
	}
	a := toolAnswer(res)
	if status == http.StatusOK {
		a.withData(res, pr.fileData)
	}
	a.Status, a.RunID = statusDone, pr.id
	return status, &a
}

// handleToolDescribe is POST /v1/tool: run_python's definition, as GET
// /v1/tool answers it, for calls that bring the body's tools
// ({"tools": [...]}, as /v1/run's): their stubs beside the server's tools',
// each written as a Go tool's is.
func (s *pausedDesk) handleToolDescribe(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	var body struct {
		Tools []ClientTool `json:"tools"`
	}
	if err := decodeBody(w, r, s.opts.MaxBody, &body); err != nil {
		s.bodyRefused(w, start, err)
		return
	}
	if err := s.checkTools(body.Tools); err != nil {
		s.refuse(w, start, http.StatusBadRequest, kindBadRequest, err.Error())
		return
	}
	manifest, _ := checkClientTools(body.Tools, nil)
	t := s.opts.Tool
	writeJSON(w, http.StatusOK, ToolDefinition{Name: t.Name(), Description: t.DescriptionWith(manifest), InputSchema: t.InputSchema(), OutputSchema: t.OutputSchema()})
}
