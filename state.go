package spine

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// runKey is the context key under which a run's *runState travels into the
// host functions. Run always sets it before the Guest executes.
type runKey struct{}

// errBudget is the tool error a program sees once it has used its tool calls.
var errBudget = errors.New("tool call budget exhausted")

// runState is one run's bookkeeping: its tool-call budget and its early-read
// futures. Tool calls arrive on the Guest's goroutine, one at a time; futures
// finish on their own goroutines, hence the mutex.
type runState struct {
	runner *Runner
	id     uint64          // RunOf's answer
	ctx    context.Context // the run's context, carrying this state; futures derive from it
	early  bool            // early reads allowed for this run

	calls   int // tool calls the program made (claimed early reads included)
	started int // early reads started, claimed or not
	// handed is how many early reads peek handed to the Guest that the
	// program has not claimed (yet); they count against MaxToolCalls when
	// peek considers handing over another, and whatever of them the
	// program never claims goes on the record as Unclaimed.
	handed int
	// wake is set by the goroutine of an early read the Guest asked after
	// (peek) when it finishes; the tick then wakes the Guest (engine.Begin).
	wake atomic.Bool

	begun        time.Time  // when the run began, for ToolCall.Start
	record       []ToolCall // Output.Calls
	loggedBudget bool       // the log has the run's tool call budget reached
	loggedEarly  bool       // the log has the run's early reads capped

	mu      sync.Mutex
	futures map[uint32]*future
	lastID  uint32
	wg      sync.WaitGroup
}

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

	watched bool // the Guest asked after it (peek) before it finished; under runState.mu
	handed  bool // peek handed its response to the Guest; under runState.mu
}

// settle records what became of a traced early read: claimed or cancelled.
func (f *future) settle(event string) {
	if f.span != nil {
		f.span.AddEvent(event)
		close(f.settled)
	}
}

// newRunState returns the state of a new run; its ctx is ctx with the state attached.
func newRunState(r *Runner, ctx context.Context, early bool) *runState {
	st := &runState{runner: r, early: early, begun: time.Now(), id: runIDs.Add(1)}
	st.ctx = context.WithValue(ctx, runKey{}, st)
	return st
}

func (st *runState) spend() error {
	if st.calls >= st.runner.opts.MaxToolCalls {
		return errBudget
	}
	st.calls++
	return nil
}

// prepare starts an early read of request and returns its handle, or 0 when it
// does not: early reads off, a tool without AllowEarlyRead, too many pending or
// started, or the run already ending. 0 is never a business result.
func (st *runState) prepare(request callRequest) uint32 {
	if !st.early || st.ctx.Err() != nil {
		return 0
	}
	spec, ok := st.runner.manifest[request.Tool]
	if !ok || !spec.AllowEarlyRead {
		return 0
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
	args, err := st.runner.approve(st.ctx, request, true)
	if err != nil {
		return 0 // not started; the program's call, if it comes, asks again
	}
	ctx, cancel := context.WithCancel(st.ctx)
	f := &future{request: request, cancel: cancel, done: make(chan struct{}), start: time.Now()}
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
// for handle 0 or an unknown handle, the call is made normally.
func (st *runState) resolve(id uint32, request callRequest) []byte {
	f := st.take(id)
	if f == nil {
		return st.runner.invoke(st.ctx, request)
	}
	if f.request.Tool != request.Tool || !bytes.Equal(f.request.Args, request.Args) {
		f.cancel()
		f.settle("spine.early_read.cancelled")
		st.unclaimed(f)
		return st.runner.invoke(st.ctx, request)
	}
	if err := st.spend(); err != nil {
		f.cancel()
		f.settle("spine.early_read.cancelled")
		st.limitOnce(&st.loggedBudget, "MaxToolCalls")
		return encodeResponse(nil, err)
	}
	<-f.done
	f.cancel()
	f.settle("spine.early_read.claimed")
	st.called(request.Tool, f.start, f.took, true, f.err)
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

// unclaimed puts on the record an early read whose response peek handed to
// the Guest and that the program did not claim: its value was in the Guest
// (the chain step's, but a program can reach what the Guest holds), so it is
// accounted for although no call of the program made it.
func (st *runState) unclaimed(f *future) {
	if f.handed {
		st.record = append(st.record, ToolCall{Tool: f.request.Tool, Start: f.start.Sub(st.begun), Duration: f.took, Early: true, Failed: f.err != nil, Unclaimed: true})
	}
}

// recordUnclaimed puts on the record, in the order they were started, the
// early reads still pending at the end of the program whose responses peek
// handed to the Guest (see unclaimed).
func (st *runState) recordUnclaimed() {
	st.mu.Lock()
	if st.handed == 0 {
		st.mu.Unlock()
		return
	}
	ids := make([]uint32, 0, st.handed)
	for id, f := range st.futures {
		if f.handed {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	fs := make([]*future, len(ids))
	for i, id := range ids {
		fs[i] = st.futures[id]
	}
	st.mu.Unlock()
	for _, f := range fs {
		st.unclaimed(f)
	}
}

// close cancels every future the program did not claim and waits for all of
// them: no future outlives its run.
func (st *runState) close() {
	st.mu.Lock()
	for id, f := range st.futures {
		f.cancel()
		f.settle("spine.early_read.cancelled")
		delete(st.futures, id)
	}
	st.mu.Unlock()
	st.wg.Wait()
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
