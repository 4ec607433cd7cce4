package spine

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"time"

	"github.com/spine-run/spine/internal/engine"
)

// recorder writes a run's Record as the run goes: the engine's Source of its
// time and random bytes (which it takes from the system and notes), and the
// bridge's note of each call. Everything reaches it on the run's goroutine.
type recorder struct {
	rec  Record
	max  int   // Options.MaxRecord
	size int   // what the record holds so far, roughly as encoded
	wall int64 // the last reads, which the next are noted against
	mono int64
}

func newRecorder(max int) *recorder {
	return &recorder{max: max, rec: Record{Version: RecordVersion, Calls: []RecordedCall{}}}
}

// room spends n bytes of the record's bound: false once it is reached, when
// the record says it is incomplete and notes nothing more.
func (rc *recorder) room(n int) bool {
	if rc.rec.Incomplete != "" {
		return false
	}
	if rc.size+n > rc.max {
		rc.rec.Incomplete = fmt.Sprintf("the record reached its %d-byte limit (Options.MaxRecord)", rc.max)
		return false
	}
	rc.size += n
	return true
}

// clockRoom is what a clock read costs the record, as encoded: a difference
// from the read before, and a comma.
const clockRoom = 8

func (rc *recorder) Walltime() int64 {
	ns := time.Now().UnixNano()
	rc.noteWall(ns)
	return ns
}

func (rc *recorder) Nanotime() int64 {
	ns := engine.Nanotime() // the clock of the Guest's unrecorded runs
	rc.noteMono(ns)
	return ns
}

func (rc *recorder) Random(p []byte) {
	_, _ = rand.Read(p) // crypto/rand never fails
	rc.noteRandom(p)
}

// noteWall, noteMono and noteRandom note what the Guest took; nothing
// without a record (a continuation that records nothing).
func (rc *recorder) noteWall(ns int64) {
	if rc != nil && rc.room(clockRoom) {
		rc.rec.Clock.Wall = append(rc.rec.Clock.Wall, ns-rc.wall)
		rc.wall = ns
	}
}

func (rc *recorder) noteMono(ns int64) {
	if rc != nil && rc.room(clockRoom) {
		rc.rec.Clock.Mono = append(rc.rec.Clock.Mono, ns-rc.mono)
		rc.mono = ns
	}
}

func (rc *recorder) noteRandom(p []byte) {
	if rc != nil && rc.room(len(p)*4/3) {
		rc.rec.Random = append(rc.rec.Random, p...)
	}
}

func (rc *recorder) Sleep(int64) bool { return true }

// call notes one call of the program, or an early read it did not claim.
func (rc *recorder) call(request callRequest, response []byte, start, took time.Duration, early, unclaimed bool) {
	if !rc.room(len(request.Tool) + len(request.Args) + len(response) + 64) {
		return
	}
	rc.rec.Calls = append(rc.rec.Calls, RecordedCall{Tool: request.Tool, Args: bytes.Clone(request.Args), Response: bytes.Clone(response),
		Early: early, Unclaimed: unclaimed, Start: start, Duration: took})
}

// boundary sets up the run's record (Request.Record) or its replay
// (Runner.Replay). A streamed program is noted once it has arrived.
func (st *runState) boundary(req *Request, inputs json.RawMessage, s *Session) {
	if req.Record {
		st.rec = newRecorder(st.runner.opts.MaxRecord)
		st.rec.rec.Guest = st.runner.guest
		if s != nil {
			st.rec.rec.Session = &RecordSession{ID: s.id, Image: st.runner.guest.Image, Runs: s.runs}
		}
		if req.Stream == nil {
			st.rec.program(st.runner, req, req.Source, inputs)
		}
	}
	if st.replay = req.replay; st.replay != nil {
		st.replay.stop = st.stop
		st.replay.note = st.rec // a continuation's record notes the replayed part too
	}
}

// use makes the record or the replay the Guest's source of time and random
// bytes for the run.
func (st *runState) use(inst *engine.Instance) {
	switch {
	case st.replay != nil:
		inst.Use(st.replay)
	case st.rec != nil:
		inst.Use(st.rec)
	}
}

// invokeNoted makes the program's call of request, and notes it on the
// run's record when it has one, with the times Output.Calls has.
func (st *runState) invokeNoted(ctx context.Context, request callRequest) []byte {
	if st.rec == nil {
		return st.runner.invoke(ctx, request)
	}
	n, start := len(st.record), time.Now()
	response := st.runner.invoke(ctx, request)
	took, at := time.Since(start), start.Sub(st.begun)
	if len(st.record) > n { // invoke put it on Output.Calls: the same times
		at, took = st.record[n].Start, st.record[n].Duration
	}
	st.rec.call(request, response, at, took, false, false)
	return response
}

// program notes what the run was asked to run; nothing without a record.
func (rc *recorder) program(r *Runner, req *Request, source string, inputs json.RawMessage) {
	if rc == nil {
		return
	}
	rc.rec.Source, rc.rec.Filename, rc.rec.Inputs = source, req.Filename, bytes.Clone(inputs)
	rc.rec.Files = req.Files
	rc.rec.EarlyReads, rc.rec.Prefix = req.EarlyReads || req.Stream != nil, req.Stream != nil
	rc.rec.Tools, rc.rec.RunTools = recordedTools(r.manifest), recordedTools(req.Tools)
	n := len(source) + len(inputs)
	for _, f := range req.Files {
		n += len(f.Name) + len(f.Data)*4/3
	}
	rc.room(n)
}

// snapshot is the record so far, for a run that waits (ToolWait.Record):
// its slices are clipped, so the notes the run makes after do not reach it.
func (rc *recorder) snapshot() *Record {
	rec := rc.rec
	rec.Calls, rec.Random = slices.Clip(rec.Calls), slices.Clip(rec.Random)
	rec.Clock.Wall, rec.Clock.Mono = slices.Clip(rec.Clock.Wall), slices.Clip(rec.Clock.Mono)
	return &rec
}

// finish completes the record with the run's outcome.
func (rc *recorder) finish(out *Output, err error) *Record {
	rc.rec.Outcome = outcomeOf(out, err)
	rec := rc.rec
	return &rec
}

// replayer answers a replay's run from its record: the Guest's time and
// random bytes (the engine's Source) and the program's calls. The first
// difference between what the program asks and what the record holds
// stops the run (stop) and is the replay's error.
//
// A continuation's replayer (live) goes on where the record ends: the calls
// past its last are made, the clock reads past its last are the system's
// (the monotonic clock counting on from the last recorded read), and the
// random bytes past its last are the system's. What the Guest takes, from
// the record or live, is noted on the continuation's own record (note),
// when it keeps one.
type replayer struct {
	rec        *Record
	calls      []RecordedCall // the program's calls, unclaimed reads left out
	next       int            // the next of calls
	wall, mono int64
	nWall      int
	nMono      int
	random     []byte
	trace      func(ReplayedCall)
	stop       func() // ends the run
	err        error  // the first difference

	live       bool      // a continuation (Runner.Continue)
	resumed    bool      // live: the program made its first call past the record (carry.go)
	askedAgain bool      // live: the call its record waited in for a decision was asked (Record.Asking)
	monoOff    int64     // live: what the system's monotonic clock is moved by
	monoOn     bool      // live: the monotonic clock reads the system's
	note       *recorder // the continuation's record; nil: none
}

func newReplayer(rec *Record, trace func(ReplayedCall)) *replayer {
	p := &replayer{rec: rec, random: rec.Random, trace: trace}
	for _, c := range rec.Calls {
		if !c.Unclaimed {
			p.calls = append(p.calls, c)
		}
	}
	return p
}

// diverge stops the run at its first difference from the record.
func (p *replayer) diverge(format string, args ...any) {
	if p.err == nil {
		p.err = fmt.Errorf("%w: "+format, append([]any{ErrDiverged}, args...)...)
		if p.stop != nil {
			p.stop()
		}
	}
}

func (p *replayer) Walltime() int64 {
	switch {
	case p.nWall < len(p.rec.Clock.Wall):
		p.wall += p.rec.Clock.Wall[p.nWall]
		p.nWall++
	case p.live:
		p.wall = time.Now().UnixNano()
	default:
		p.diverge("the program read the clock (wall) more than the %d times the record holds", len(p.rec.Clock.Wall))
	}
	p.note.noteWall(p.wall)
	return p.wall
}

func (p *replayer) Nanotime() int64 {
	switch {
	case p.nMono < len(p.rec.Clock.Mono):
		p.mono += p.rec.Clock.Mono[p.nMono]
		p.nMono++
	case p.live:
		if !p.monoOn { // from here the system's clock, from the last read on
			p.monoOn, p.monoOff = true, p.mono-engine.Nanotime()
		}
		p.mono = max(p.mono, engine.Nanotime()+p.monoOff)
	default:
		p.diverge("the program read the clock (monotonic) more than the %d times the record holds", len(p.rec.Clock.Mono))
	}
	p.note.noteMono(p.mono)
	return p.mono
}

func (p *replayer) Random(b []byte) {
	n := copy(b, p.random)
	p.random = p.random[n:]
	if n < len(b) {
		if p.live {
			_, _ = rand.Read(b[n:])
		} else {
			clear(b[n:])
			p.diverge("the program took more random bytes than the %d the record holds", len(p.rec.Random))
		}
	}
	p.note.noteRandom(b)
}

// Sleep waits only once a continuation has read every recorded clock read:
// before, the time the program reads next is the record's.
func (p *replayer) Sleep(int64) bool {
	return p.live && p.nWall >= len(p.rec.Clock.Wall) && p.nMono >= len(p.rec.Clock.Mono)
}

// resumes says a continuation starts early reads once it is past its
// record: one whose record was taken at a wait (carry.go).
func (p *replayer) resumes() bool {
	return p.live && p.rec.Waiting != nil
}

// asking returns the call a continuation's record waited in for a decision
// (Record.Asking) once the program is past the record, the first time
// only; nil otherwise, and for a nil replayer.
func (p *replayer) asking() *RecordAsking {
	if p == nil || !p.over() || p.rec.Asking == nil || p.askedAgain {
		return nil
	}
	p.askedAgain = true
	return p.rec.Asking
}

// over says a continuation has answered every call of its record: the
// program's next calls are made.
func (p *replayer) over() bool {
	return p.live && p.next >= len(p.calls)
}

// ReplayedCall is one call of a replay, as ReplayOptions.Trace sees it: its
// number (from 1) and the call as the record holds it, with its times in the
// recorded run.
type ReplayedCall struct {
	N int
	RecordedCall
}

// replayed answers the program's call of request in a replay, from the
// record, and puts the recorded call on the Output (Calls, ToolCalls); a
// continuation past its record makes the call.
func (st *runState) replayed(ctx context.Context, request callRequest) []byte {
	if st.replay.over() {
		if !st.carryOut(request) {
			return encodeResponse(nil, st.replay.err)
		}
		if f := st.carried(0, request); f != nil {
			return st.claim(f, request)
		}
		return st.invokeNoted(ctx, request)
	}
	c, ok := st.replay.call(request)
	if !ok {
		return encodeResponse(nil, st.replay.err)
	}
	st.calls++
	if len(st.record) < st.runner.opts.MaxToolCalls {
		st.record = append(st.record, ToolCall{Tool: c.Tool, Start: c.Start, Duration: c.Duration, Early: c.Early, Failed: c.Failed()})
	}
	if st.replay.rec.Waiting == nil && !c.refused() {
		st.own(ctx, request.Tool) // numbered as when it was made (ToolCallOf); else by the record's wait (carry.go)
	}
	if st.rec != nil {
		st.rec.call(request, c.Response, c.Start, c.Duration, c.Early, false)
	}
	return c.Response
}

// call is the record's next call, when it is the program's call of request;
// otherwise the replay has diverged (false).
func (p *replayer) call(request callRequest) (RecordedCall, bool) {
	n := p.next + 1
	if p.next >= len(p.calls) {
		p.diverge("call %d: the program called %s, the record has no more calls (it holds %d)", n, showCall(request.Tool, request.Args), len(p.calls))
		return RecordedCall{}, false
	}
	c := p.calls[p.next]
	if c.Tool != request.Tool || !sameArgs(c.Args, request.Args) {
		p.diverge("call %d: the program called %s where the record has %s", n, showCall(request.Tool, request.Args), showCall(c.Tool, c.Args))
		return RecordedCall{}, false
	}
	p.next++
	if p.trace != nil {
		p.trace(ReplayedCall{N: n, RecordedCall: c})
	}
	return c, true
}

// end checks, once the run is over, that the program made every call the
// record holds and took every clock read and random byte.
func (p *replayer) end() {
	switch {
	case p.next < len(p.calls):
		c := p.calls[p.next]
		p.diverge("call %d: the program made %d calls; the record holds %d, the next %s", p.next+1, p.next, len(p.calls), showCall(c.Tool, c.Args))
	case p.nWall < len(p.rec.Clock.Wall) || p.nMono < len(p.rec.Clock.Mono):
		p.diverge("the program read the clock %d times; the record holds %d reads", p.nWall+p.nMono, len(p.rec.Clock.Wall)+len(p.rec.Clock.Mono))
	case len(p.random) > 0:
		p.diverge("the program took %d random bytes; the record holds %d", len(p.rec.Random)-len(p.random), len(p.rec.Random))
	}
}

// sameArgs reports whether a and b are the same JSON value (numbers by their
// text, objects by their members, whatever their order).
func sameArgs(a, b json.RawMessage) bool {
	if bytes.Equal(a, b) {
		return true
	}
	decode := func(raw json.RawMessage) (any, bool) {
		d := json.NewDecoder(bytes.NewReader(raw))
		d.UseNumber()
		var v any
		return v, d.Decode(&v) == nil
	}
	va, okA := decode(a)
	vb, okB := decode(b)
	return okA && okB && reflect.DeepEqual(va, vb)
}

// showCall is a call as an error names it: tool(args), args cut short.
func showCall(tool string, args json.RawMessage) string {
	const max = 200
	s := string(args)
	if len(s) > max {
		s = s[:max] + "…"
	}
	return tool + "(" + s + ")"
}
