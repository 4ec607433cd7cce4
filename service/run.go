package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/fleet"
)

func (s *Server) handleRun(w http.ResponseWriter, r *http.Request) {
	s.runJSON(w, r, time.Now(), nil)
}

// runJSON answers a run whose request is r's JSON body (POST /v1/run, and
// POST /v1/sessions/{id}/run), run in session sess or, when sess is nil, in
// a Guest of the Runner's pool. It reports whether a run with client tools
// keeps sess, to release it when it ends.

func (s *Server) runJSON(w http.ResponseWriter, r *http.Request, start time.Time, sess *fleet.Session) (kept bool) {
	var req runRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, s.opts.MaxBody))
	dec.DisallowUnknownFields()
	err := dec.Decode(&req)
	if err == nil {
		// Read to the end: a second value is an error, and a body read to
		// its end lets net/http notice a client that goes away.
		if extra := dec.Decode(&struct{}{}); extra != io.EOF {
			err = extra
			if err == nil {
				err = errors.New("more than one JSON value in the body")
			}
		}
	}
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			s.refuse(w, start, http.StatusRequestEntityTooLarge, kindTooLarge, fmt.Sprintf("the request body is over the %d-byte limit", tooBig.Limit))
			return false
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			s.refuse(w, start, http.StatusRequestTimeout, kindReadTimeout, "the request body did not arrive within the server's read timeout")
			return false
		}
		s.refuse(w, start, http.StatusBadRequest, kindBadRequest, "bad JSON body: "+err.Error())
		return false
	}
	if req.Source == "" {
		s.refuse(w, start, http.StatusBadRequest, kindBadRequest, `"source" is missing or empty`)
		return false
	}
	inputs, err := s.runner.CheckInputs(req.Inputs)
	if err != nil {
		s.refuse(w, start, outcomeStatus[spine.Classify(err)], string(spine.Classify(err)), err.Error())
		return false
	}
	if req.TimeoutMS < 0 {
		s.refuse(w, start, http.StatusBadRequest, kindBadRequest, `"timeout_ms" must not be negative`)
		return false
	}
	if err := s.runner.CheckFiles(req.Files); err != nil {
		s.refuse(w, start, outcomeStatus[spine.Classify(err)], string(spine.Classify(err)), err.Error())
		return false
	}
	run := spine.Request{
		Source:     req.Source,
		Inputs:     inputs,
		EarlyReads: req.EarlyReads,
		Timeout:    s.timeout(req.TimeoutMS),
		Files:      req.Files,
		Record:     req.Record,
	}
	remote, ok := s.desk.openRemotes(w, r, start, req.MCPServers, req.Tools)
	if !ok {
		return false
	}
	run.Tools = remote.Tools()
	if len(req.Tools) > 0 || s.desk.asksApproval() {
		return s.desk.runClient(w, r, start, run, clientRun{tools: req.Tools, sess: sess, remote: remote})
	}
	s.run(w, r, start, run, nil, sess)
	closeRemote(remote)
	return false
}

// timeout returns the run's time limit for a request's timeout_ms (0 = none).
func (s *Server) timeout(ms int64) time.Duration {
	if ms <= 0 || ms > s.opts.MaxTimeout.Milliseconds() {
		return s.opts.MaxTimeout
	}
	return time.Duration(ms) * time.Millisecond
}

// run admits req if a slot is free, runs it and answers. body is the
// streamed program, nil for /v1/run. sess is the session to run it in, nil
// for a Guest of the pool: a session's run first waits, holding no slot,
// for the session's previous run or snapshot to end, for at most its own
// time limit.
func (s *Server) run(w http.ResponseWriter, r *http.Request, start time.Time, req spine.Request, body *streamBody, sess *fleet.Session) {
	// The time limit is this context's, not Request.Timeout: its Err
	// tells a time-out from a client that went away, whichever came second.
	limit := req.Timeout
	req.Timeout = 0
	ctx, cancel := context.WithTimeout(r.Context(), limit)
	defer cancel()
	target := s.runner.Run
	if sess != nil {
		if err := sess.Lock(ctx); err != nil {
			s.sessions.sessionFailed(w, r, start, opRun, sess, err)
			return
		}
		target = func(ctx context.Context, req spine.Request) (*spine.Output, error) {
			return s.fleet.Run(ctx, sess, req)
		}
	}
	// giveTurn gives the session's turn back, after the slot: the request
	// waiting for the turn then finds the slot free.
	giveTurn := func() {
		if sess != nil {
			sess.Unlock()
		}
	}
	if !s.admit(w, start, body != nil, giveTurn) {
		return
	}
	if body != nil {
		w.Header().Del("Connection") // the run reads the body
	}
	var events *eventStream
	var stdout, stderr *output
	if wantsEvents(r) {
		if body != nil {
			// The answer starts while the program still arrives.
			_ = http.NewResponseController(w).EnableFullDuplex()
		}
		events = startEvents(w)
		stdout, stderr = &output{events: events, name: "stdout"}, &output{events: events, name: "stderr"}
		req.Stdout, req.Stderr = stdout, stderr
	}
	var (
		out     *spine.Output
		status  int
		e       *Error
		runTime time.Duration
	)
	func() {
		// Free the slot, and then the session's turn, before answering (and
		// even if Run panicked): a client that has its answer can be sure
		// its next request finds the slot free.
		defer giveTurn()
		s.metrics.inFlight.Inc()
		defer func() {
			<-s.slots
			s.metrics.inFlight.Dec()
		}()
		if body != nil {
			s.metrics.streamsInFlight.Inc()
			defer func() {
				<-s.streams
				s.metrics.streamsInFlight.Dec()
			}()
		}
		if body != nil {
			defer body.finish() // even if Run panicked
		}
		runStart := time.Now()
		var err error
		out, err = target(ctx, req)
		runTime = time.Since(runStart)
		if body != nil {
			// A Read still pending in the Runner's reader returns, and how
			// reading ended is known before the run is judged.
			body.finish()
		}
		status, e = classify(ctx, limit, err, body)
		if sess != nil && e != nil {
			status, e = s.sessions.sessionRunError(r.Context(), sess, err, status, e)
		}
		status, e = s.drain.cutAnswer(w, status, e)
	}()
	s.answer(w, start, status, e, out, runTime, events, stdout, stderr)
}

// admit takes a run slot, and for a stream one of the stream slots too, or
// refuses the request with 429 (no queue) and gives the session's turn back.
func (s *Server) admit(w http.ResponseWriter, start time.Time, stream bool, giveTurn func()) bool {
	if stream {
		select {
		case s.streams <- struct{}{}:
		default:
			giveTurn()
			w.Header().Set("Retry-After", "1")
			s.refuse(w, start, http.StatusTooManyRequests, kindOverloaded, fmt.Sprintf("all %d stream slots are busy (streams may hold %d of the %d run slots); try again later", cap(s.streams), cap(s.streams), cap(s.slots)))
			return false
		}
	}
	select {
	case s.slots <- struct{}{}:
	default:
		if stream {
			<-s.streams
		}
		giveTurn()
		w.Header().Set("Retry-After", "1")
		s.refuse(w, start, http.StatusTooManyRequests, kindOverloaded, fmt.Sprintf("all %d run slots are busy; try again later", cap(s.slots)))
		return false
	}
	return true
}

// answer counts the run in the metrics, logs it and answers it: as JSON, or
// as the closing "result" event when events is not nil.
func (s *Server) answer(w http.ResponseWriter, start time.Time, status int, e *Error, out *spine.Output, runTime time.Duration, events *eventStream, stdout, stderr *output) {
	if e != nil && e.Kind == kindTooManySessions {
		w.Header().Set("Retry-After", "1")
	}

	outcome := "ok"
	if e != nil {
		outcome = e.Kind
		s.metrics.errors.WithLabelValues(e.Kind).Inc()
	}
	s.metrics.runs.WithLabelValues(outcome).Inc()
	s.metrics.duration.WithLabelValues(outcome).Observe(runTime.Seconds())
	resp := Response{Error: e, Timing: Timing{RunMS: ms(runTime)}}
	resp.SetOutput(out)
	if out != nil {
		s.metrics.toolCalls.Add(float64(out.ToolCalls))
	}
	switch {
	case e == nil:
		s.opts.Logger.Debug("run", "status", status, "run_ms", resp.Timing.RunMS)
	case e.Kind == kindGuest || e.Kind == kindInternal:
		s.opts.Logger.Error("run failed", "status", status, "kind", e.Kind, "error", e.Message)
	default:
		s.opts.Logger.Debug("run", "status", status, "kind", e.Kind, "error", e.Message)
	}
	resp.Timing.TotalMS = ms(time.Since(start))
	if events != nil {
		stdout.flush()
		stderr.flush()
		if resp.Value == nil {
			resp.Value = json.RawMessage("null")
		}
		events.result(status, resp)
		return
	}
	writeJSON(w, status, resp)
}
