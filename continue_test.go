package spine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
)

// pausingProgram takes the clock and random bytes and calls a Runner's tool
// and the run's own tool ask before its second ask, where the test takes its
// record; after it, only what it got, and a monotonic clock that must not go
// back.
const pausingProgram = `
import random, time, uuid
t0 = time.monotonic()
pre = [random.random(), time.time(), str(uuid.uuid4()), lookup(key="book")]
a = ask(q="first")
pre.append(random.randint(0, 10**9))
print("before", pre)
b = ask(q="second")
print("after", b)
result = {"pre": pre, "a": a, "b": b, "mono": time.monotonic() >= t0}
`

// askSpec is the run's own tool ask: it answers its call n with answer(n)
// and counts its calls in calls.
func askSpec(calls *[]int) Manifest {
	return Manifest{"ask": {Description: "Ask the caller.", Call: func(ctx context.Context, args json.RawMessage) (any, error) {
		*calls = append(*calls, ToolCallOf(ctx))
		return fmt.Sprintf("answer %d to %s", ToolCallOf(ctx), args), nil
	}}}
}

// TestContinue: a run recorded up to where it waits for its second own call
// (ToolWait.Record), continued from that record by another Runner, ends as
// the run did, with no call the record holds made again: the Runner's tool
// not at all, ask only for its call 2, which Waiting hears of again.
func TestContinue(t *testing.T) {
	var lookups atomic.Int64
	r := newRunner(t, countingManifest(&lookups), nil)
	var asked []int
	var paused *Record
	req := Request{Source: pausingProgram, Record: true, Tools: askSpec(&asked), Waiting: func(w ToolWait) {
		if w.Call == 2 {
			paused = w.Record
		}
	}}
	whole := recordRun(t, r, req)
	if paused == nil || len(paused.Calls) != 2 || paused.Outcome != (RecordOutcome{}) {
		t.Fatalf("the record at the second ask: %+v", paused)
	}
	encoded, err := paused.Encode()
	if err != nil {
		t.Fatal(err)
	}
	rec, err := ParseRecord(encoded)
	if err != nil {
		t.Fatal(err)
	}

	var lookups2 atomic.Int64
	r2 := newRunner(t, countingManifest(&lookups2), nil)
	var asked2 []int
	var waits []string
	// The continuation starts call 2 again as it takes up its record's
	// wait, and the program waits for it: its ask answers once Waiting
	// has heard of it (an ask that answered at once could finish before the
	// program claims it, and nothing would wait).
	heard := make(chan struct{})
	tools := askSpec(&asked2)
	spec := tools["ask"]
	answer := spec.Call
	spec.Call = func(ctx context.Context, args json.RawMessage) (any, error) {
		select {
		case <-heard:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return answer(ctx, args)
	}
	tools["ask"] = spec
	cont := Request{Record: true, Tools: tools, Waiting: func(w ToolWait) {
		waits = append(waits, fmt.Sprint(w.Call, w.Started, w.Record != nil && len(w.Record.Calls) == 2))
		if w.Call == 2 && len(waits) == 1 {
			close(heard)
		}
	}}
	out, err := r2.Continue(context.Background(), rec, cont)
	if err != nil {
		t.Fatal(err)
	}
	sameOutput(t, whole, out)
	if got := fmt.Sprint(lookups2.Load(), asked2, waits); got != "0 [2] [2 2 true]" {
		t.Fatalf("continuation: lookups, asks and waits %s, want 0 [2] [2 2 true]", got)
	}
	if out.ToolCalls != whole.ToolCalls || len(out.Record.Calls) != len(whole.Record.Calls) {
		t.Fatalf("continuation: %d calls, %d recorded; the run: %d, %d", out.ToolCalls, len(out.Record.Calls), whole.ToolCalls, len(whole.Record.Calls))
	}
	// The continuation's record is the whole run's: it replays, calling nothing.
	replayed, err := r2.Replay(context.Background(), out.Record, nil)
	if err != nil {
		t.Fatal(err)
	}
	sameOutput(t, whole, replayed)
	if lookups2.Load() != 0 || len(asked2) != 1 {
		t.Fatalf("the replay called tools: %d lookups, asks %v", lookups2.Load(), asked2)
	}
}

// TestContinueRefused: a continuation names no program of its own, and has
// the record's own tools.
func TestContinueRefused(t *testing.T) {
	r := newRunner(t, testManifest(), nil)
	var asked []int
	var paused *Record
	recordRun(t, r, Request{Source: pausingProgram, Record: true, Tools: askSpec(&asked), Waiting: func(w ToolWait) {
		if w.Call == 1 {
			paused = w.Record
		}
	}})
	other := askSpec(&asked)
	spec := other["ask"]
	spec.Description = "Something else."
	for name, req := range map[string]Request{
		"source":       {Source: "1", Tools: askSpec(&asked)},
		"no tools":     {},
		"more tools":   {Tools: Manifest{"ask": askSpec(&asked)["ask"], "zebra": askSpec(&asked)["ask"]}},
		"other schema": {Tools: Manifest{"ask": spec}},
	} {
		if _, err := r.Continue(context.Background(), paused, req); !errors.Is(err, ErrBadRequest) {
			t.Errorf("%s: %v, want ErrBadRequest", name, err)
		}
	}
}

// TestContinueDiverges: a record the program does not ask for again (its
// call edited) stops the continuation at the difference.
func TestContinueDiverges(t *testing.T) {
	r := newRunner(t, testManifest(), nil)
	var asked []int
	var paused *Record
	recordRun(t, r, Request{Source: pausingProgram, Record: true, Tools: askSpec(&asked), Waiting: func(w ToolWait) {
		if w.Call == 2 {
			paused = w.Record
		}
	}})
	paused.Calls[0].Args = json.RawMessage(`{"key":"pen"}`)
	_, err := r.Continue(context.Background(), paused, Request{Tools: askSpec(&asked)})
	if !errors.Is(err, ErrDiverged) {
		t.Fatalf("%v, want ErrDiverged", err)
	}
}
