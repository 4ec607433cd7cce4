package spine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/internal/spinetest"
)

// askRunner is a Runner whose Approve defers every call of "delete" to a
// person, with a reason; calls counts the calls that reached the tool.
func askRunner(t *testing.T, calls *atomic.Int32) *spine.Runner {
	m := suiteManifest()
	m["delete"] = spine.ToolSpec{AllowEarlyRead: true, Call: func(ctx context.Context, args json.RawMessage) (any, error) {
		calls.Add(1)
		return "deleted " + string(args), nil
	}}
	return spinetest.NewRunner(t, m, &spine.Options{PoolSize: -1, Approve: func(ctx context.Context, tool string, args json.RawMessage, early bool) error {
		if tool == "delete" {
			return fmt.Errorf("deleting needs a person: %w", spine.ErrAsk)
		}
		return nil
	}})
}

// TestApprovalWaits: a call Options.Approve defers waits in the program,
// the tool not called, until Request.Approval decides; allowed, the tool
// runs; refused, the program's call raises PermissionError with the
// refusal's message. With early reads on, the deferred early read is not
// started: the program's call asks.
func TestApprovalWaits(t *testing.T) {
	var calls atomic.Int32
	r := askRunner(t, &calls)
	src := "print('before')\ntry:\n    result = delete(path='a\\u00e9')\nexcept PermissionError as e:\n    result = 'refused: ' + str(e)\n"
	for _, c := range []struct {
		name     string
		decision error
		want     string
		calls    int32
	}{
		{"allowed", nil, `"deleted {\"path\":\"aé\"}"`, 1},
		{"refused", errors.New("not today"), `"refused: not today"`, 0},
	} {
		for _, early := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/early=%v", c.name, early), func(t *testing.T) {
				calls.Store(0)
				asked, decide := make(chan spine.ApprovalCall), make(chan error)
				approval := func(ctx context.Context, call spine.ApprovalCall) error {
					asked <- call
					return <-decide
				}
				type result struct {
					out *spine.Output
					err error
				}
				done := make(chan result, 1)
				go func() {
					out, err := r.Run(context.Background(), spine.Request{Source: src, EarlyReads: early, Approval: approval})
					done <- result{out, err}
				}()
				call := <-asked
				if call.N != 1 || call.Tool != "delete" || string(call.Args) != `{"path":"aé"}` || call.Stdout != "before\n" ||
					call.Reason != "deleting needs a person: the call needs a person's approval" {
					t.Fatalf("asked %+v", call)
				}
				if n := calls.Load(); n != 0 {
					t.Fatalf("the tool ran %d times before the decision", n)
				}
				decide <- c.decision
				res := <-done
				if res.err != nil {
					t.Fatal(res.err)
				}
				if string(res.out.Value) != c.want || calls.Load() != c.calls {
					t.Fatalf("value %s, tool calls %d; want %s, %d", res.out.Value, calls.Load(), c.want, c.calls)
				}
				if len(res.out.Calls) != 1 || res.out.Calls[0].Failed != (c.decision != nil) || res.out.Calls[0].Early {
					t.Fatalf("calls %+v", res.out.Calls)
				}
			})
		}
	}
}

// TestApprovalNumbersCalls: each deferred call of a run is asked in turn,
// numbered; calls Approve allows are not asked.
func TestApprovalNumbersCalls(t *testing.T) {
	var calls atomic.Int32
	r := askRunner(t, &calls)
	var asked []string
	out, err := r.Run(context.Background(), spine.Request{
		Source: "a = delete(path='1')\nb = lookup(key='book')\ntry:\n    delete(path='2')\nexcept PermissionError as e:\n    c = str(e)\nresult = [a, c]",
		Approval: func(ctx context.Context, call spine.ApprovalCall) error {
			asked = append(asked, fmt.Sprintf("%d %s %s", call.N, call.Tool, call.Args))
			if call.N == 2 {
				return errors.New("once is enough")
			}
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(asked, "; ") != `1 delete {"path":"1"}; 2 delete {"path":"2"}` || string(out.Value) != `["deleted {\"path\":\"1\"}","once is enough"]` {
		t.Fatalf("asked %q, value %s", asked, out.Value)
	}
}

// TestApprovalNoOneToAsk: without Request.Approval a deferred call is
// refused, and the message says why.
func TestApprovalNoOneToAsk(t *testing.T) {
	var calls atomic.Int32
	r := askRunner(t, &calls)
	out, err := r.Run(context.Background(), spine.Request{Source: "try:\n    delete(path='x')\nexcept PermissionError as e:\n    result = str(e)"})
	if err != nil {
		t.Fatal(err)
	}
	want := `"tool call refused: deleting needs a person: the call needs a person's approval, and this run has no one to ask (Request.Approval is unset)"`
	if string(out.Value) != want || calls.Load() != 0 {
		t.Fatalf("value %s, tool calls %d", out.Value, calls.Load())
	}
}

// TestApprovalEndsWithRun: a run whose ctx ends while a call waits for its
// approval ends with ctx's error; the tool is not called.
func TestApprovalEndsWithRun(t *testing.T) {
	var calls atomic.Int32
	r := askRunner(t, &calls)
	ctx, cancel := context.WithCancel(context.Background())
	_, err := r.Run(ctx, spine.Request{Source: "delete(path='x')", Approval: func(ctx context.Context, call spine.ApprovalCall) error {
		cancel()
		<-ctx.Done()
		return ctx.Err()
	}})
	if !errors.Is(err, context.Canceled) || calls.Load() != 0 {
		t.Fatalf("err %v, tool calls %d", err, calls.Load())
	}
}

// TestContinueAsksAgain: a run continued from the record taken where it
// waited for a person's decision asks Request.Approval about that call
// again, whatever the continuing Runner's Options.Approve says of it: a
// person's refusal stands on a Runner whose hook allows the call (a policy
// changed between replicas), and a call the record holds is not asked
// again. A program that reaches another call first diverges.
func TestContinueAsksAgain(t *testing.T) {
	var calls atomic.Int32
	r := askRunner(t, &calls)
	src := "a = delete(path='x')\ntry:\n    result = [a, delete(path='y')]\nexcept PermissionError as e:\n    result = [a, 'refused: ' + str(e)]\n"
	records := make(chan *spine.Record, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	approval := func(ctx context.Context, call spine.ApprovalCall) error {
		if call.N == 1 {
			return nil // delete(path='x'): allowed
		}
		records <- call.Record // delete(path='y'): the replica dies here
		cancel()
		<-ctx.Done()
		return ctx.Err()
	}
	if _, err := r.Run(ctx, spine.Request{Source: src, Record: true, Approval: approval}); err == nil {
		t.Fatal("the run given up at its second approval ended")
	}
	rec := <-records
	if rec == nil || rec.Asking == nil || rec.Asking.Tool != "delete" || string(rec.Asking.Args) != `{"path":"y"}` {
		t.Fatalf("the record at the approval: %+v", rec)
	}
	if calls.Load() != 1 {
		t.Fatalf("delete called %d times before the continuation, want 1", calls.Load())
	}

	var allowed atomic.Int32
	m := suiteManifest()
	m["delete"] = spine.ToolSpec{AllowEarlyRead: true, Call: func(ctx context.Context, args json.RawMessage) (any, error) {
		allowed.Add(1)
		return "deleted", nil
	}}
	lenient := spinetest.NewRunner(t, m, &spine.Options{PoolSize: -1, Approve: func(context.Context, string, json.RawMessage, bool) error { return nil }})
	var asked []spine.ApprovalCall
	out, err := lenient.Continue(context.Background(), rec, spine.Request{Approval: func(_ context.Context, call spine.ApprovalCall) error {
		asked = append(asked, call)
		return errors.New("no, not y")
	}})
	if err != nil {
		t.Fatal(err)
	}
	if string(out.Value) != `["deleted {\"path\":\"x\"}","refused: no, not y"]` || allowed.Load() != 0 {
		t.Fatalf("continued: %s, delete called %d times; want the person's refusal to stand", out.Value, allowed.Load())
	}
	if len(asked) != 1 || asked[0].Tool != "delete" || string(asked[0].Args) != `{"path":"y"}` || asked[0].Reason != rec.Asking.Reason {
		t.Fatalf("asked %+v, want delete(path='y') once, with the record's reason", asked)
	}

	// Another program's first call past the record diverges.
	edited := *rec
	edited.Source = strings.Replace(src, "delete(path='y')", "delete(path='z')", 1)
	if _, err := lenient.Continue(context.Background(), &edited, spine.Request{Approval: func(context.Context, spine.ApprovalCall) error { return nil }}); !errors.Is(err, spine.ErrDiverged) {
		t.Fatalf("a program asking another call: %v, want ErrDiverged", err)
	}
}
