package spine

import (
	"bytes"
	"context"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// future is one early read: a tool call started before the program reached it.
type future struct {
	request  callRequest
	cancel   context.CancelFunc
	done     chan struct{}
	response []byte        // set before done is closed
	err      error         // the tool's error, set before done is closed
	start    time.Time     // when it started
	took     time.Duration // how long the tool ran, set before done is closed

	// With tracing, the early read's span lasts until the read is settled
	// (claimed or cancelled) and the tool has returned, whichever is later.
	span    trace.Span
	settled chan struct{}

	id      uint32 // its handle
	own     int    // its number among the calls of the run's own tools (ToolCallOf); 0: a Runner's tool
	call    bool   // carried (carry.go): the program's call its record's run waited in, not an early read
	watched bool   // the Guest asked after it (peek) before it finished; under runState.mu
	handed  bool   // peek handed its response to the Guest; under runState.mu
}

// settle records what became of a traced early read: claimed or cancelled.
func (f *future) settle(event string) {
	if f.span != nil {
		f.span.AddEvent(event)
		close(f.settled)
	}
}

// prepare starts an early read of request and returns its handle, or 0 when it
// does not: early reads off, a tool without AllowEarlyRead, too many pending or
// started, or the run already ending. 0 is never a business result.
func (st *runState) prepare(request callRequest) uint32 {
	if !st.early || st.ctx.Err() != nil || st.replay != nil && !st.replay.resumed {
		return 0 // a continuation's replayed part: the record answers, carry.go
	}
	spec, ok := st.tool(request.Tool)
	if !ok || !spec.AllowEarlyRead {
		return 0
	}
	if id := st.adopt(request); id != 0 {
		return id // started before the record's wait (carry.go)
	}
	// Only the Guest's goroutine adds or takes futures: what is checked
	// here still holds below, after the hook.
	st.mu.Lock()
	full := len(st.futures) >= st.runner.opts.MaxPendingEarlyReads || st.started >= st.runner.opts.MaxEarlyReads
	st.mu.Unlock()
	if full {
		st.limitOnce(&st.loggedEarly, "MaxPendingEarlyReads or MaxEarlyReads")
		return 0
	}
	args, err := st.approve(st.ctx, request, true)
	if err != nil {
		return 0 // not started; the program's call, if it comes, asks again
	}
	ctx, cancel := context.WithCancel(st.ctx)
	f := &future{request: request, cancel: cancel, done: make(chan struct{}), start: time.Now()}
	f.own, ctx = st.own(ctx, request.Tool)
	ctx, f.span = st.startTool(ctx, request.Tool, true)
	if f.span != nil {
		f.settled = make(chan struct{})
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.futures == nil {
		st.futures = make(map[uint32]*future)
	}
	st.lastID++
	st.started++
	f.id = st.lastID
	st.futures[st.lastID] = f
	st.wg.Add(1)
	go func() {
		defer st.wg.Done()
		f.response, f.err = callTool(ctx, request.Tool, spec.Call, args)
		f.took = time.Since(f.start)
		if f.span != nil {
			f.span.AddEvent("spine.tool.returned")
			toolFailed(f.span, f.err)
		}
		close(f.done)
		st.mu.Lock()
		watched := f.watched
		st.mu.Unlock()
		if watched {
			st.wake.Store(true)
		}
		if f.span != nil {
			<-f.settled
			f.span.End()
		}
	}()
	return st.lastID
}

// resolve answers the program's call of request. A handle is single-use: it is
// consumed when its tool name and argument bytes equal the request's, and its
// result (value or error) is delivered as it is, never retried. Otherwise, or
// for handle 0 or an unknown handle, the call is made normally. A
// continuation's replayed part is answered by its record, and past it a
// call its record's run had started is claimed first (carry.go).
func (st *runState) resolve(id uint32, request callRequest) []byte {
	if st.replay != nil && !st.replay.over() {
		return st.replayed(st.ctx, request) // a replay: no read started, the record answers
	}
	if st.replay != nil && !st.carryOut(request) {
		return encodeResponse(nil, st.replay.err)
	}
	if f := st.carried(id, request); f != nil {
		return st.claim(f, request)
	}
	f := st.take(id)
	if f == nil {
		return st.invokeNoted(st.ctx, request)
	}
	if f.request.Tool != request.Tool || !bytes.Equal(f.request.Args, request.Args) {
		f.cancel()
		f.settle("spine.early_read.cancelled")
		st.unclaimed(f)
		return st.invokeNoted(st.ctx, request)
	}
	return st.claim(f, request)
}

// claim answers the program's call of request with future f, which it
// claims: f's response once it has finished, counted as a call.
func (st *runState) claim(f *future, request callRequest) []byte {
	if err := st.spend(); err != nil {
		f.cancel()
		f.settle("spine.early_read.cancelled")
		st.limitOnce(&st.loggedBudget, "MaxToolCalls")
		response := encodeResponse(nil, err)
		if st.rec != nil {
			st.rec.call(request, response, time.Since(st.begun), 0, false, false)
		}
		return response
	}
	select {
	case <-f.done:
	default:
		st.wait(f.own, f.request, f.id)
		<-f.done
	}
	f.cancel()
	f.settle("spine.early_read.claimed")
	st.called(request.Tool, f.start, f.took, !f.call, f.err)
	if st.rec != nil {
		st.rec.call(request, f.response, f.start.Sub(st.begun), f.took, !f.call, false)
	}
	return f.response
}

func (st *runState) take(id uint32) *future {
	if id == 0 {
		return nil
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	f := st.futures[id]
	delete(st.futures, id)
	if f != nil && f.handed {
		st.handed--
	}
	return f
}

// peekState is what peek found.
type peekState int

const (
	peekDone    peekState = iota // finished: the response is there
	peekRunning                  // still running; the Guest is woken when it finishes
	peekNone                     // no such read: claimed, cancelled, unknown
)

// peek answers the Guest's question whether the early read id has finished,
// without claiming it: its response once it has, and nothing while it runs or
// when there is no such read. A read still running is watched: when it
// finishes, wake is set, and the tick wakes the Guest to run its chain step.
// The Guest hands the value on only to its chain step, but the Host does not
// rely on that (the chain step shares the interpreter with the program): a
// response handed over counts against MaxToolCalls until the program claims
// it, and goes on the record as Unclaimed if it never does.
//
// capacity is the room the Guest offered: only a response that fits in it is
// handed over, and accounted for (0 only asks for a wake).
func (st *runState) peek(id uint32, capacity uint32) ([]byte, peekState) {
	if id == 0 {
		return nil, peekNone
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	f := st.futures[id]
	if f == nil {
		return nil, peekNone
	}
	select {
	case <-f.done:
		if !f.handed && capacity != 0 && uint64(len(f.response)) <= uint64(capacity) {
			// A response handed over is a tool result in the Guest: it
			// must fit in the budget as if it were a call.
			if st.calls+st.handed >= st.runner.opts.MaxToolCalls {
				return nil, peekNone
			}
			f.handed = true
			st.handed++
		}
		return f.response, peekDone
	default:
		f.watched = true
		return nil, peekRunning
	}
}
