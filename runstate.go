package spine

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// runKey is the context key under which a run's *runState travels into the
// host functions. Run always sets it before the Guest executes.
type runKey struct{}

// runOf is the state of the run ctx belongs to: the one way the bridge
// reaches it. Every call into the Guest carries it (newRunState); a host
// function called without it is a bug of the Host's, and panics.
func runOf(ctx context.Context) *runState {
	return ctx.Value(runKey{}).(*runState)
}

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
	tools  Manifest        // the run's own tools (Request.Tools), beside the Runner's

	stop   context.CancelFunc // ends the run
	rec    *recorder          // Request.Record's; nil: not recorded
	replay *replayer          // Replay's; nil: not a replay

	waiting  func(ToolWait)                      // Request.Waiting
	approval ApprovalFunc                        // Request.Approval
	asked    int                                 // calls deferred to approval so far (ApprovalCall.N)
	output   func() (string, string, bool, bool) // the Guest's output so far, for waiting
	// ownCalls numbers the calls of the run's own tools as they start
	// (ToolCallOf); only the Guest's goroutine starts calls.
	ownCalls int
	// carry are a continuation's calls its record's run had started and not
	// claimed where it waited (carry.go): ids of futures, oldest first.
	carry []uint32

	calls int // tool calls the program made (claimed early reads included)
	// discoveries are the program's calls of tools.search and
	// tools.describe (discover.go), not tool calls.
	discoveries int
	started     int // early reads started, claimed or not
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

// newRunState returns the state of a new run; its ctx is ctx with the state attached.
func newRunState(r *Runner, ctx context.Context, early bool) *runState {
	st := &runState{runner: r, early: early, begun: time.Now(), id: runIDs.Add(1)}
	st.ctx = context.WithValue(ctx, runKey{}, st)
	return st
}

// tool returns the tool a call of the run names: the Runner's, else the
// run's own.
func (st *runState) tool(name string) (ToolSpec, bool) {
	if spec, ok := st.runner.manifest[name]; ok {
		return spec, true
	}
	spec, ok := st.tools[name]
	return spec, ok
}

// own numbers a call of request's tool when it is one of the run's own
// (Request.Tools) and returns ctx carrying the number; 0 and ctx for others.
func (st *runState) own(ctx context.Context, tool string) (int, context.Context) {
	if len(st.tools) == 0 {
		return 0, ctx // most runs: nothing to number on a tool call's path
	}
	if _, runner := st.runner.manifest[tool]; runner {
		return 0, ctx
	}
	if _, ok := st.tools[tool]; !ok {
		return 0, ctx
	}
	st.ownCalls++
	return st.ownCalls, context.WithValue(ctx, callKey{}, st.ownCalls)
}

// wait tells Request.Waiting that the program waits for call n of the run's
// own tools: its call of request, an early read (id, its future's) or not.
func (st *runState) wait(n int, request callRequest, id uint32) {
	if n > 0 && st.waiting != nil {
		w := ToolWait{Call: n, Started: st.ownCalls}
		if st.output != nil {
			w.Stdout, w.Stderr, _, _ = st.output()
		}
		if st.rec != nil {
			w.Record = st.rec.snapshot()
			w.Record.Waiting = st.waitingAt(n, request, id)
		}
		st.waiting(w)
	}
}

// callKey is the context key of a call's number (runState.own).
type callKey struct{}

// ToolCallOf returns the number of the call of one of a run's own tools
// (Request.Tools) that a tool's Call serves, from the ctx it gets: 1, 2, …
// in the order the run started them, early reads included; 0 for a call of
// the Runner's tools or outside a run. Request.Waiting names calls by it.
func ToolCallOf(ctx context.Context) int {
	n, _ := ctx.Value(callKey{}).(int)
	return n
}

func (st *runState) spend() error {
	if st.calls >= st.runner.opts.MaxToolCalls {
		return errBudget
	}
	st.calls++
	return nil
}

// unclaimed puts on the record an early read whose response peek handed to
// the Guest and that the program did not claim: its value was in the Guest
// (the chain step's, but a program can reach what the Guest holds), so it is
// accounted for although no call of the program made it.
func (st *runState) unclaimed(f *future) {
	if f.handed {
		st.record = append(st.record, ToolCall{Tool: f.request.Tool, Start: f.start.Sub(st.begun), Duration: f.took, Early: true, Failed: f.err != nil, Unclaimed: true})
		if st.rec != nil {
			st.rec.call(f.request, f.response, f.start.Sub(st.begun), f.took, true, true)
		}
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

// ToolCall is one tool call of a run, as Output.Calls records it.
type ToolCall struct {
	Tool string `json:"tool"`

	// Start is when the tool started, from the start of the run; Duration is
	// how long it ran. An early read starts before the program reaches the call.
	// In JSON both are nanoseconds.
	Start    time.Duration `json:"start_ns"`
	Duration time.Duration `json:"duration_ns"`

	// Early says the call was answered by an early read.
	Early bool `json:"early"`

	// Failed says the call raised in the program: the tool's error, a
	// refusal by Options.Approve, an unknown tool.
	Failed bool `json:"failed"`

	// Unclaimed says this was an early read whose response the Host handed
	// to the Guest (to start a chained read, docs/early-reads.md) but that no
	// call of the program claimed. It is on the record because its value
	// was in the Guest; it is not one of Output.ToolCalls.
	Unclaimed bool `json:"unclaimed,omitempty"`
}

// called records a call the program made in Output.Calls (at most
// MaxToolCalls: every recorded call spent one), and logs its failure.
func (st *runState) called(tool string, start time.Time, took time.Duration, early bool, err error) {
	if len(st.record) < st.runner.opts.MaxToolCalls {
		st.record = append(st.record, ToolCall{Tool: tool, Start: start.Sub(st.begun), Duration: took, Early: early, Failed: err != nil})
	}
	if err != nil && st.runner.log != nil {
		msg := "spine: tool failed"
		var refused *refusedError
		if errors.As(err, &refused) {
			msg = "spine: tool call refused"
		}
		st.runner.log.LogAttrs(st.ctx, slog.LevelInfo, msg, slog.String("tool", tool), slog.Bool("early", early), slog.String("error", err.Error()))
	}
}

// limitOnce logs the first time a run reaches a per-run limit.
func (st *runState) limitOnce(seen *bool, limit string) {
	if st.runner.log == nil || *seen {
		return
	}
	*seen = true
	st.runner.log.LogAttrs(st.ctx, slog.LevelWarn, "spine: limit reached", slog.String("limit", limit))
}
