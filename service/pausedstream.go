package service

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/spine-run/spine"
)

// A run with client tools whose request asked for text/event-stream is
// answered by one stream to its end: its output as stdout and stderr events,
// each call of a client tool as a tool_call event as soon as the call
// reaches its Call (an early read's while the program has not reached it,
// in prefix mode while the program still arrives), and the result event. A
// tool_call event of a call the program makes comes after the output the
// program wrote before it. The caller posts results to tool_results as its
// tools answer, each call on its own (tool_results answers 202): the run
// pauses, holding no slot, while it waits for a call not yet answered, and
// goes on when that call's result comes.

// keepAlive is how often a run's stream waiting for what comes next sends
// a comment (": keep-alive"), which clients ignore: a proxy in front closes
// a connection silent for long (nginx after a minute), and a run may wait
// for its caller for --tool-wait.
var keepAlive = 15 * time.Second

// runStream is the event stream of a run with client tools.
type runStream struct {
	events         *eventStream
	stdout, stderr *output
	wake           chan struct{}
	queue          []streamItem // under the run's mu
}

// streamItem is what the stream sends next: a tool_call event, after the
// output the program wrote before the call (stdout and stderr bytes), an
// approval_required event likewise, or, when neither, the result event.
type streamItem struct {
	call           *PendingCall
	approval       *ApprovalRequest // an approval_required event (approvals.go), when call is nil
	stdout, stderr int
}

// approvalEvent is an approval_required event's data.
type approvalEvent struct {
	ApprovalRequest
	RunID string `json:"run_id"`
}

// toolCallEvent is a tool_call event's data.
type toolCallEvent struct {
	PendingCall
	RunID string `json:"run_id"`
}

func newRunStream(w http.ResponseWriter) *runStream {
	events := startEvents(w)
	return &runStream{events: events, wake: make(chan struct{}, 1),
		stdout: &output{events: events, name: "stdout"}, stderr: &output{events: events, name: "stderr"}}
}

// push queues item. Under the run's mu.
func (st *runStream) push(item streamItem) {
	st.queue = append(st.queue, item)
	select {
	case st.wake <- struct{}{}:
	default:
	}
}

// announce queues the tool_call event of call c, which has reached its Call
// and is now pending. Under pr.mu.
func (pr *pausedRun) announce(c *clientCall) {
	item := streamItem{call: &PendingCall{ID: callID(c.n), Name: c.name, Arguments: c.args}}
	if pr.wait.Call == c.n { // the program waits for it: after what it wrote so far
		item.stdout, item.stderr = len(pr.wait.Stdout), len(pr.wait.Stderr)
	}
	pr.asked[item.call.ID] = false
	pr.stream.push(item)
}

// streamRun sends pr's events until its end, the result event. A client
// that goes away (the stream closed) stops the run; the handler still
// waits for its end, as the run writes to the stream until then.
func (s *pausedDesk) streamRun(r *http.Request, start time.Time, pr *pausedRun) {
	st := pr.stream
	defer st.events.stop()
	gone := r.Context().Done()
	quiet := time.NewTicker(keepAlive)
	defer quiet.Stop()
	for {
		pr.mu.Lock()
		var item streamItem
		next := len(st.queue) > 0
		if next {
			item, st.queue = st.queue[0], st.queue[1:]
		}
		final := pr.final
		pr.mu.Unlock()
		if !next {
			select {
			case <-st.wake:
			case <-gone:
				pr.cancel(s.goneCause())
				gone = nil
			case <-quiet.C:
				if st.events.comment("keep-alive") != nil {
					pr.cancel(s.goneCause())
				}
			}
			continue
		}
		if item.call == nil && item.approval == nil {
			st.stdout.flush()
			st.stderr.flush()
			final.resp.Timing.TotalMS = ms(time.Since(start))
			st.events.result(final.status, final.resp)
			return
		}
		if !st.caughtUp(item, gone, pr) {
			pr.cancel(s.goneCause())
			gone = nil
		}
		name, data := "tool_call", []byte(nil)
		if item.call != nil {
			data, _ = json.Marshal(toolCallEvent{*item.call, pr.id})
		} else {
			name = "approval_required"
			data, _ = json.Marshal(approvalEvent{*item.approval, pr.id})
		}
		if st.events.send(name, data) != nil {
			pr.cancel(s.goneCause())
		}
	}
}

// goneCause is why a run stops whose stream ended (its client went away,
// or the Server cut its requests: then the run stops as when the Server
// closes, kept in the store for another replica).
func (s *pausedDesk) goneCause() error {
	if s.drain.cutDone() {
		return spine.ErrClosed
	}
	return errGone
}

// caughtUp waits until the outputs have taken item's bytes, or the run has
// ended (its output may never come whole). It reports false when the
// client went away first.
func (st *runStream) caughtUp(item streamItem, gone <-chan struct{}, pr *pausedRun) bool {
	for st.stdout.taken.Load() < int64(item.stdout) || st.stderr.taken.Load() < int64(item.stderr) {
		select {
		case <-st.events.moved:
		case <-pr.ctx.Done():
			return true
		case <-gone:
			return false
		}
	}
	return true
}

// ResultsAccepted is the answer of tool_results for a run answered as
// events: its next calls and its end come on its stream.
type ResultsAccepted struct {
	RunID    string `json:"run_id"`
	Accepted int    `json:"accepted"` // the results taken, every one of the request's
}

// answers reports whether results hold one for call id.
func answers(results []toolResult, id string) bool {
	for _, res := range results {
		if res.ID == id {
			return true
		}
	}
	return false
}
