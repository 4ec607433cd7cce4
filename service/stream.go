package service

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spine-run/spine"
)

// handleStream runs prefix mode: the request body is the program, read as it
// arrives. Its settings come from the query string or, when absent there,
// from headers: inputs (Spine-Inputs), timeout_ms (Spine-Timeout-Ms),
// early_reads (Spine-Early-Reads; accepted, but prefix mode always reads
// early), tools (Spine-Tools: the client tools, a JSON array as /v1/run's
// "tools"; paused.go).
func (s *Server) handleStream(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	// Until the stream is admitted: net/http would read the body of a
	// refused request to its end before answering, and a stream may never end.
	w.Header().Set("Connection", "close")
	query := r.URL.Query()
	param := func(name, header string) string {
		if query.Has(name) {
			return query.Get(name)
		}
		return r.Header.Get(header)
	}
	inputs, err := s.runner.CheckInputs(json.RawMessage(param("inputs", "Spine-Inputs")))
	if err != nil {
		s.refuse(w, start, outcomeStatus[spine.Classify(err)], string(spine.Classify(err)), err.Error())
		return
	}
	var timeoutMS int64
	if v := param("timeout_ms", "Spine-Timeout-Ms"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			s.refuse(w, start, http.StatusBadRequest, kindBadRequest, fmt.Sprintf("timeout_ms %q is not a non-negative integer", v))
			return
		}
		timeoutMS = n
	}
	if v := param("early_reads", "Spine-Early-Reads"); v != "" {
		if _, err := strconv.ParseBool(v); err != nil {
			s.refuse(w, start, http.StatusBadRequest, kindBadRequest, fmt.Sprintf("early_reads %q is not a boolean", v))
			return
		}
	}
	var record bool
	if v := param("record", "Spine-Record"); v != "" {
		if record, err = strconv.ParseBool(v); err != nil {
			s.refuse(w, start, http.StatusBadRequest, kindBadRequest, fmt.Sprintf("record %q is not a boolean", v))
			return
		}
	}
	tools, err := clientToolsSetting(r)
	if err != nil {
		s.refuse(w, start, http.StatusBadRequest, kindBadRequest, err.Error())
		return
	}
	body := &streamBody{
		body:       http.MaxBytesReader(w, r.Body, s.opts.MaxBody),
		controller: http.NewResponseController(w),
		idle:       s.opts.StreamIdle,
	}
	req := spine.Request{
		Stream:     body,
		Inputs:     inputs,
		EarlyReads: true,
		Timeout:    s.timeout(timeoutMS),
		Record:     record,
	}
	if len(tools) > 0 || s.desk.asksApproval() {
		s.desk.runClient(w, r, start, req, clientRun{tools: tools, body: body})
		return
	}
	s.run(w, r, start, req, body, nil)
}

// decodeTools decodes a stream's tools setting: one JSON array of client
// tools, unknown fields refused as in a /v1/run body.
func decodeTools(v string, tools *[]ClientTool) error {
	dec := json.NewDecoder(strings.NewReader(v))
	dec.DisallowUnknownFields()
	if err := dec.Decode(tools); err != nil {
		return err
	}
	if extra := dec.Decode(&struct{}{}); extra != io.EOF {
		return errors.New("more than one JSON value")
	}
	return nil
}

// streamBody is the request body of /v1/run/stream as the Runner reads it. It
// remembers how reading failed (the Runner keeps only the text). Each Read
// may wait for the client at most idle: it sets the connection's read
// deadline first (net/http lifts it when the body ends, as it starts
// watching the connection for a client that goes away). Its Close — which
// the Runner calls to unblock a pending Read when the run's context ends —
// sets a read deadline in the past instead of closing the body: net/http's
// body Close waits for a pending Read, which would wait for the client.
type streamBody struct {
	body       io.ReadCloser
	controller *http.ResponseController
	idle       time.Duration

	mu       sync.Mutex
	reads    sync.WaitGroup // the Read in progress
	closed   bool           // Close or finish was called: no more Reads
	deadline bool           // read deadlines work (SetReadDeadline succeeded)
	err      error          // the first error other than io.EOF
	idleOut  bool           // err is the idle deadline's
	done     bool           // the body ended (io.EOF or an error)
	idleAt   time.Time      // the idle deadline of the last Read
	closedAt time.Time      // when close set a deadline in the past to end a Read
}

var errStreamClosed = errors.New("the stream was closed")

func (b *streamBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return 0, errStreamClosed
	}
	b.idleAt = time.Now().Add(b.idle)
	b.deadline = b.controller.SetReadDeadline(b.idleAt) == nil
	b.reads.Add(1)
	b.mu.Unlock()
	defer b.reads.Done()

	n, err := b.body.Read(p)
	if err != nil {
		b.mu.Lock()
		if !b.done && err != io.EOF {
			b.err = err
			// The idle deadline's, unless close cut the Read short first:
			// when the idle deadline fires, net/http cancels the request and
			// the run closes the stream, which may happen before this.
			b.idleOut = errors.Is(err, os.ErrDeadlineExceeded) && (!b.closed || !b.closedAt.Before(b.idleAt))
		}
		b.done = true
		b.mu.Unlock()
	}
	return n, err
}

// Close unblocks a pending Read.
func (b *streamBody) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.close()
	return nil
}

// close sets closed and a read deadline that has passed, unless the body has
// ended. b.mu is held.
func (b *streamBody) close() {
	if !b.closed && !b.done {
		b.closedAt = time.Now()
		b.controller.SetReadDeadline(b.closedAt)
	}
	b.closed = true
}

// finish unblocks a Read still pending after the run ended and waits for it
// to return, so that failure and idled tell how reading ended.
func (b *streamBody) finish() {
	b.mu.Lock()
	b.close()
	wait := b.deadline // else nothing unblocks the Read: do not wait for it
	b.mu.Unlock()
	if wait {
		b.reads.Wait()
	}
}

// failure returns how reading the body failed, or nil.
func (b *streamBody) failure() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

// idled reports whether the stream ended because it sent nothing for idle.
func (b *streamBody) idled() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.idleOut
}
