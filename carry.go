package spine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// A run that waits for one of its own tools with early reads on has often
// started more than that call: the reads its program will claim later, each
// numbered as it started (ToolCallOf). A record taken there (ToolWait.Record)
// lists them (Record.Waiting), and Runner.Continue takes them up again where
// the replay reaches the call waited for, the first its record does not
// answer: each under its number, answered by its recorded response when it
// had finished, else started again; the program's calls claim them by
// request, oldest first, before any read it prepared since, as the Guest
// claims its reads. Until then the continuation starts no early read: the
// record answers what the program claims, and the carried calls are the
// ones it had started.

// waitingAt lists the calls the run has started and not claimed, and the
// one it waits for (call n, its request; id, its future's, or 0: the
// program's call, started last).
//
// The reads of the Runner's tools still running are waited for first (the
// program waits anyway, for its own tool), so that the record has their
// answers and a continuation calls none of them again; only the run's own
// tools' calls are left for it to take up.
func (st *runState) waitingAt(n int, request callRequest, id uint32) *RecordWait {
	st.mu.Lock()
	ids := make([]uint32, 0, len(st.futures))
	var running []*future
	for fid, f := range st.futures {
		ids = append(ids, fid)
		if f.own == 0 {
			running = append(running, f)
		}
	}
	st.mu.Unlock()
	for _, f := range running {
		select {
		case <-f.done:
		case <-st.ctx.Done():
		}
	}
	slices.Sort(ids)
	st.mu.Lock()
	defer st.mu.Unlock()
	w := &RecordWait{Call: n, Started: st.ownCalls, Reads: st.started, Pending: make([]RecordedStart, 0, len(ids)+1)}
	waited := RecordedStart{N: n, Tool: request.Tool, Args: request.Args, Early: id != 0}
	for _, fid := range ids {
		f := st.futures[fid]
		if f == nil {
			continue
		}
		if id != 0 && fid > id && waited.Tool != "" {
			w.Pending, waited.Tool = append(w.Pending, waited), ""
		}
		p := RecordedStart{N: f.own, Tool: f.request.Tool, Args: f.request.Args, Early: !f.call}
		select {
		case <-f.done:
			p.Response = f.response
		default:
		}
		w.Pending = append(w.Pending, p)
	}
	if waited.Tool != "" {
		w.Pending = append(w.Pending, waited)
	}
	return w
}

// carryOut takes up, at a continuation's first call past its record, the
// calls its record's run had started and not claimed where it waited;
// false when this call is not the one that run waited for (the replay has
// diverged). Once per run; true for a record not taken at a wait.
func (st *runState) carryOut(request callRequest) bool {
	p := st.replay
	if p.resumed {
		return true
	}
	p.resumed = true
	w := p.rec.Waiting
	if w == nil {
		return true
	}
	i := slices.IndexFunc(w.Pending, func(c RecordedStart) bool { return c.N == w.Call })
	if i < 0 || w.Pending[i].Tool != request.Tool || !sameArgs(w.Pending[i].Args, request.Args) {
		want := "a call the record does not list"
		if i >= 0 {
			want = showCall(w.Pending[i].Tool, w.Pending[i].Args)
		}
		p.diverge("call %d: the program called %s where the record's run waited for %s", p.next+1, showCall(request.Tool, request.Args), want)
		return false
	}
	st.ownCalls, st.started = w.Started, w.Reads
	for _, c := range w.Pending {
		if c.N == 0 && c.Response == nil {
			continue // a Runner's tool still running: the program's call makes it
		}
		st.carryCall(c)
	}
	return true
}

// carryCall adds one carried call to the run's futures: done, with its
// recorded response, or started again under its number. It was approved
// where it started: the approval hook is not asked again, and its arguments
// are what the hook judged (canonicalArgs).
func (st *runState) carryCall(c RecordedStart) {
	request := callRequest{Tool: c.Tool, Args: c.Args}
	ctx, cancel := context.WithCancel(st.ctx)
	f := &future{request: request, cancel: cancel, done: make(chan struct{}), start: time.Now(), own: c.N, call: !c.Early}
	if c.N > 0 {
		ctx = context.WithValue(ctx, callKey{}, c.N)
	}
	st.mu.Lock()
	if st.futures == nil {
		st.futures = make(map[uint32]*future)
	}
	st.lastID++
	f.id = st.lastID
	st.futures[f.id] = f
	st.carry = append(st.carry, f.id)
	st.mu.Unlock()
	if c.Response != nil {
		f.response = c.Response
		if (RecordedCall{Response: c.Response}).Failed() {
			f.err = errRecordedFailure
		}
		close(f.done)
		return
	}
	spec, ok := st.tool(c.Tool)
	args := c.Args
	if st.runner.opts.Approve != nil {
		if canonical, err := canonicalArgs(args); err == nil {
			args = canonical
		}
	}
	ctx, f.span = st.startTool(ctx, c.Tool, true)
	if f.span != nil {
		f.settled = make(chan struct{})
	}
	st.wg.Add(1)
	go func() {
		defer st.wg.Done()
		if ok {
			f.response, f.err = callTool(ctx, c.Tool, spec.Call, args)
		} else {
			f.err = errors.New("unknown tool: " + c.Tool)
			f.response = encodeResponse(nil, f.err)
		}
		f.took = time.Since(f.start)
		if f.span != nil {
			f.span.AddEvent("spine.tool.returned")
			toolFailed(f.span, f.err)
		}
		close(f.done)
		if f.span != nil {
			<-f.settled
			f.span.End()
		}
	}()
}

// errRecordedFailure marks a carried call whose recorded response is an
// error (ToolCall.Failed).
var errRecordedFailure = errors.New("spine: the recorded call failed")

// carried takes the oldest carried call of request, if there is one. The
// program claims it (its call, or its claim of read id with the same
// request, which the Guest made since): read id is then carried in turn,
// for the program's next call of that request.
func (st *runState) carried(id uint32, request callRequest) *future {
	st.mu.Lock()
	defer st.mu.Unlock()
	for i, cid := range st.carry {
		f := st.futures[cid]
		if f == nil || f.request.Tool != request.Tool || !sameArgs(f.request.Args, request.Args) {
			continue
		}
		st.carry = slices.Delete(st.carry, i, i+1)
		delete(st.futures, cid)
		if f.handed {
			st.handed--
		}
		if id != 0 && id != cid && st.futures[id] != nil && !slices.Contains(st.carry, id) {
			st.carry = append(st.carry, id)
			slices.Sort(st.carry)
		}
		return f
	}
	return nil
}

// adopt hands the Guest, for its prepare of request, the oldest carried
// call of request: the program's prepare that started it, made again
// where the replay's program made it after the call waited for (an
// executor's call, say, made at once in the replayed part, where the
// recorded run's was claimed later). 0: none.
func (st *runState) adopt(request callRequest) uint32 {
	if len(st.carry) == 0 {
		return 0
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	for i, id := range st.carry {
		if f := st.futures[id]; f != nil && !f.call && f.request.Tool == request.Tool && sameArgs(f.request.Args, request.Args) {
			st.carry = slices.Delete(st.carry, i, i+1)
			f.request.Args = request.Args // the Guest claims it with its own bytes
			return id
		}
	}
	return 0
}

// checkWaiting refuses a record's wait that no run of this Runner could
// have written: more pending calls than a run keeps, a number out of its
// range or given twice, a tool that is not the run's own where it is
// numbered (or the reverse), a call waited for that is not pending.
func (r *Runner) checkWaiting(w *RecordWait, own Manifest) error {
	if w == nil {
		return nil
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: the record's wait: "+format, append([]any{ErrBadRequest}, args...)...)
	}
	if len(w.Pending) > r.opts.MaxPendingEarlyReads+1 || w.Reads < 0 || w.Reads > r.opts.MaxEarlyReads || w.Started < 1 {
		return bad("%d pending calls, %d started, %d reads", len(w.Pending), w.Started, w.Reads)
	}
	seen := make(map[int]bool, len(w.Pending))
	for _, c := range w.Pending {
		_, isOwn := own[c.Tool]
		_, isRunner := r.manifest[c.Tool]
		switch {
		case c.N < 0 || c.N > w.Started || seen[c.N]:
			return bad("call %d of %s: not a number of its own (1 to %d, once each)", c.N, c.Tool, w.Started)
		case c.N > 0 && !isOwn || c.N == 0 && !isRunner:
			return bad("call %d: %s is not one of the %s tools", c.N, c.Tool, map[bool]string{true: "run's own", false: "Runner's"}[c.N > 0])
		}
		seen[c.N] = c.N > 0
	}
	if !seen[w.Call] {
		return bad("the call waited for, %d, is not pending", w.Call)
	}
	return nil
}
