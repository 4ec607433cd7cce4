package service_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/internal/spinetest"
	"github.com/spine-run/spine/service"
)

// askingServer is a Server whose Runner defers every call of lookup to a
// person (spine.ErrAsk).
func askingServer(t *testing.T, opts *service.Options) string {
	t.Helper()
	svc := service.New(askingRunner(t), opts)
	t.Cleanup(func() { svc.Close(context.Background()) })
	return spinetest.ServeHTTP(t, svc).URL
}

// askingRunner is a Runner whose Approve defers every call of lookup to a
// person (spine.ErrAsk).
func askingRunner(t *testing.T) *spine.Runner {
	t.Helper()
	return spinetest.NewRunner(t, spinetest.NewTools().Manifest(), &spine.Options{PoolSize: -1,
		Approve: func(ctx context.Context, tool string, args json.RawMessage, early bool) error {
			if tool == "lookup" {
				return fmt.Errorf("prices are secret: %w", spine.ErrAsk)
			}
			return nil
		}})
}

// decide posts decisions to a paused run.
func (c client) decide(runID string, decisions ...any) (int, service.Response) {
	c.t.Helper()
	return c.runWith("/v1/runs/"+runID+"/approvals", run{"approvals": decisions})
}

func allow(id string, yes bool, reason string) map[string]any {
	return map[string]any{"id": id, "allow": yes, "reason": reason}
}

// approvalPause checks that out is a pause for the approval of want
// (tool(arguments)) and returns its id.
func approvalPause(t *testing.T, status int, out service.Response, want string) string {
	t.Helper()
	if status != http.StatusOK || out.Status != "approval_required" || !strings.HasPrefix(out.RunID, "run_") || len(out.Approvals) != 1 ||
		out.Approvals[0].Tool+string(out.Approvals[0].Arguments) != want || out.Approvals[0].Reason != "prices are secret: the call needs a person's approval" {
		t.Fatalf("status %d %q run %q approvals %+v (error %+v), want an approval of %s", status, out.Status, out.RunID, out.Approvals, out.Error, want)
	}
	return out.Approvals[0].ID
}

// TestApprovals: a call Options.Approve defers pauses the run with the call,
// its output so far and an id, holding no slot; a decision continues it:
// allowed, the tool runs; refused, PermissionError with the reason. Bad,
// unknown, repeated and late decisions, and another token's, are refused.
func TestApprovals(t *testing.T) {
	url := askingServer(t, &service.Options{Slots: 1, Token: "a", Tokens: []string{"b"}})
	a, b := client{t: t, url: url, token: "a"}, client{t: t, url: url, token: "b"}
	src := "print('asking')\nfirst = lookup(key='book')\n" +
		"try:\n    lookup(key='pen')\nexcept PermissionError as e:\n    second = str(e)\n[first, second]"
	status, out := a.runWith("/v1/run", run{"source": src})
	id := approvalPause(t, status, out, `lookup{"key":"book"}`)
	runID := out.RunID
	if id != "approval_1" || out.Stdout != "asking\n" {
		t.Fatalf("id %q stdout %q", id, out.Stdout)
	}
	// The one slot is free while the run waits, and a run that asks for no
	// approval ends as it would, with a run id.
	if status, out = b.runWith("/v1/run", run{"source": "1 + 1"}); status != http.StatusOK || string(out.Value) != "2" || out.Status != "done" {
		t.Fatalf("a run beside a paused one: status %d %+v", status, out)
	}
	status, out = b.decide(runID, allow(id, true, ""))
	wantError(t, "another token's run", status, out, http.StatusNotFound, "not_found")
	for _, c := range []struct {
		what      string
		decisions []any
		status    int
		kind      string
	}{
		{"no decision", nil, http.StatusBadRequest, "bad_request"},
		{"an unknown id", []any{allow("approval_2", true, "")}, http.StatusBadRequest, "bad_request"},
		{"no allow", []any{map[string]any{"id": id}}, http.StatusBadRequest, "bad_request"},
		{"decided twice", []any{allow(id, true, ""), allow(id, false, "")}, http.StatusBadRequest, "bad_request"},
	} {
		status, out = a.decide(runID, c.decisions...)
		wantError(t, c.what, status, out, c.status, c.kind)
	}
	status, out = a.results(runID, value(id, 1))
	wantError(t, "a tool result for an approval", status, out, http.StatusBadRequest, "bad_request")

	status, out = a.decide(runID, allow(id, true, ""))
	second := approvalPause(t, status, out, `lookup{"key":"pen"}`)
	status, out = a.decide(runID, allow(id, true, ""))
	wantError(t, "a call decided already", status, out, http.StatusConflict, "conflict")
	status, out = a.decide(runID, allow(second, false, "not the pens"))
	if status != http.StatusOK || out.Status != "done" || out.Error != nil || string(out.Value) != `[21,"not the pens"]` || out.ToolCalls != 2 {
		t.Fatalf("end: status %d %+v", status, out)
	}
	status, out = a.decide(runID, allow(second, true, ""))
	wantError(t, "an ended run", status, out, http.StatusNotFound, "not_found")
}

// TestApprovalsWait: a caller that never decides frees the run at
// ToolWait, and a late decision is told so.
func TestApprovalsWait(t *testing.T) {
	url := askingServer(t, &service.Options{ToolWait: 1, Token: "a"})
	c := client{t: t, url: url, token: "a"}
	status, out := c.runWith("/v1/run", run{"source": "lookup(key='book')"})
	// The pause, unless the 1 ns wait ran out and ended the run before the
	// request took its pause: then the end, in its place.
	runID := out.RunID
	if out.Status == "done" {
		wantError(t, "a run stopped before its pause was read", status, out, http.StatusRequestTimeout, "tool_wait")
	} else {
		approvalPause(t, status, out, `lookup{"key":"book"}`)
	}
	spinetest.WaitFor(t, "the run stopped at --tool-wait", func() bool {
		return strings.Contains(metrics(t, url, "a"), `spine_runs_total{outcome="tool_wait"} 1`)
	})
	status, out = c.decide(runID, allow("approval_1", true, ""))
	wantError(t, "a late decision", status, out, http.StatusRequestTimeout, "tool_wait")
	if !strings.Contains(out.Error.Message, "did not decide the approval") {
		t.Errorf("message %q", out.Error.Message)
	}
}

// TestApprovalsEvents: a run answered as events sends an approval_required
// event after the output before the call, takes the decision (202) and
// ends with its result event.
func TestApprovalsEvents(t *testing.T) {
	c := client{t: t, url: askingServer(t, nil)}
	ch := c.runEvents(t.Context(), "/v1/run", run{"source": "print('asking')\ntry:\n    lookup(key='book')\nexcept PermissionError as e:\n    result = str(e)"})
	e, stdout := upTo(t, ch, "approval_required")
	var req struct {
		service.ApprovalRequest
		RunID string `json:"run_id"`
	}
	if err := json.Unmarshal([]byte(e.data), &req); err != nil || req.ID != "approval_1" || req.Tool != "lookup" || stdout != "asking\n" {
		t.Fatalf("approval_required %s (stdout %q): %v", e.data, stdout, err)
	}
	data, _ := json.Marshal(run{"approvals": []any{allow(req.ID, false, "no")}})
	if status, raw, _ := c.send("POST", "/v1/runs/"+req.RunID+"/approvals", "application/json", data); status != http.StatusAccepted {
		t.Fatalf("approvals: status %d %s", status, raw)
	}
	e, _ = upTo(t, ch, "result")
	if status, out := resultOf(t, e); status != http.StatusOK || string(out.Value) != `"no"` {
		t.Fatalf("result: status %d %+v", status, out)
	}
}

// TestApprovalsSession: a session's run may wait for an approval; the
// session keeps what the run did.
func TestApprovalsSession(t *testing.T) {
	c := client{t: t, url: askingServer(t, nil)}
	id := c.create()
	status, out := c.runWith("/v1/sessions/"+id+"/run", run{"source": "p = lookup(key='book')\np"})
	approval := approvalPause(t, status, out, `lookup{"key":"book"}`)
	if status, out = c.decide(out.RunID, allow(approval, true, "")); status != http.StatusOK || string(out.Value) != "21" {
		t.Fatalf("status %d %+v", status, out)
	}
	if status, out = c.runWith("/v1/sessions/"+id+"/run", run{"source": "p * 2"}); status != http.StatusOK || string(out.Value) != "42" || out.Status != "done" {
		t.Fatalf("the next run: status %d %+v", status, out)
	}
}
