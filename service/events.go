package service

import (
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"
)

// wantsEvents reports whether the client asked for the run as an event
// stream: an Accept header that names text/event-stream.
func wantsEvents(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept") {
		for _, part := range strings.Split(v, ",") {
			if t, _, err := mime.ParseMediaType(strings.TrimSpace(part)); err == nil && t == "text/event-stream" {
				return true
			}
		}
	}
	return false
}

// eventStream is a run answered as Server-Sent Events: "stdout" and "stderr"
// events carry the program's output as it runs, each one's data a JSON
// string (so that any bytes, "\r" and invalid UTF-8 included, fit an event),
// and one "result" event at the end carries the run's Response, with the
// status the JSON answer would have had.
type eventStream struct {
	mu      sync.Mutex
	w       io.Writer
	flusher *http.ResponseController
	failed  bool
	// moved is signalled each time an output takes a Write (a run with
	// client tools waits for its output before a tool_call event).
	moved chan struct{}
}

// startEvents answers 200 with an event stream; the run's outcome comes in
// its result event.
func startEvents(w http.ResponseWriter) *eventStream {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	e := &eventStream{w: w, flusher: http.NewResponseController(w), moved: make(chan struct{}, 1)}
	e.flusher.Flush()
	return e
}

// send writes one event. An error (the client went away) fails the stream:
// the run's Request.Stdout stops forwarding, and the run itself ends with
// the request's context.
func (e *eventStream) send(event string, data []byte) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.failed {
		return errEventsFailed
	}
	var b []byte
	b = append(b, "event: "...)
	b = append(b, event...)
	b = append(b, "\ndata: "...)
	b = append(b, data...)
	b = append(b, "\n\n"...)
	_, err := e.w.Write(b)
	if err == nil {
		err = e.flusher.Flush()
	}
	if err != nil {
		e.failed = true
	}
	return err
}

var errEventsFailed = io.ErrClosedPipe

// comment writes a comment line, which clients ignore: to keep a quiet
// stream's connection open.
func (e *eventStream) comment(text string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.failed {
		return errEventsFailed
	}
	_, err := io.WriteString(e.w, ": "+text+"\n\n")
	if err == nil {
		err = e.flusher.Flush()
	}
	if err != nil {
		e.failed = true
	}
	return err
}

// stop sends nothing more, once a send in progress has ended: the handler
// is about to return, after which its ResponseWriter must not be used.
func (e *eventStream) stop() {
	e.mu.Lock()
	e.failed = true
	e.mu.Unlock()
}

// result sends the result event: resp with status.
func (e *eventStream) result(status int, resp Response) {
	kind := ""
	if resp.Error != nil {
		kind = resp.Error.Kind
	}
	if w, ok := e.w.(http.ResponseWriter); ok {
		noteAnswer(w, status, kind)
	}
	data, err := json.Marshal(struct {
		Status int `json:"status"`
		Response
	}{status, resp})
	if err != nil {
		data = []byte(`{"status":500,"value":null,"error":{"kind":"internal","message":"encoding the answer failed"}}`)
	}
	e.send("result", data)
}

// output is one of the run's streams as events; a chunk that ends inside a
// UTF-8 sequence keeps that end for the next one.
type output struct {
	events *eventStream
	name   string
	held   []byte
	taken  atomic.Int64 // bytes Write took, sent or not
	skipTo atomic.Int64 // the bytes before it are taken, not sent (a replay's output: durable.go)
}

func (o *output) Write(whole []byte) (int, error) {
	p := whole
	if skip := o.skipTo.Load() - o.taken.Load(); skip > 0 {
		p = p[min(skip, int64(len(p))):]
	}
	data := append(o.held, p...)
	keep := incompleteRune(data)
	o.held = append([]byte(nil), data[len(data)-keep:]...)
	err := o.emit(data[:len(data)-keep])
	o.taken.Add(int64(len(whole)))
	select {
	case o.events.moved <- struct{}{}:
	default:
	}
	if err != nil {
		return 0, err
	}
	return len(whole), nil
}

func (o *output) emit(p []byte) error {
	if len(p) == 0 {
		return nil
	}
	text, _ := json.Marshal(string(p))
	return o.events.send(o.name, text)
}

// flush sends what was kept back.
func (o *output) flush() {
	o.emit(o.held)
	o.held = nil
}

// incompleteRune is how many bytes at the end of data begin a UTF-8
// sequence not yet complete.
func incompleteRune(data []byte) int {
	for i := 1; i < utf8.UTFMax && i <= len(data); i++ {
		c := data[len(data)-i]
		if c < utf8.RuneSelf {
			return 0
		}
		if utf8.RuneStart(c) {
			if utf8.FullRune(data[len(data)-i:]) {
				return 0
			}
			return i
		}
	}
	return 0
}
