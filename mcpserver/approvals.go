package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/spine-run/spine"
)

// A call the Runner's Options.Approve defers to a person (spine.ErrAsk) is
// asked of the client's user through MCP elicitation (a form: allow or
// not, and why), while run_python's call waits; the run's slot is free
// meanwhile, its time limit runs on. A client that cannot be asked (it declares no elicitation,
// or speaks a protocol version on which a server asks only by input
// requests of a retried call) has the call refused, the message saying
// why: the program's call raises PermissionError with it.

// maxShownArgs is the most of a call's arguments the question shows.
const maxShownArgs = 2000

// approvalSchema is the elicitation form: whether to allow the call, and why.
var approvalSchema = map[string]any{
	"type": "object",
	"properties": map[string]any{
		"allow":  map[string]any{"type": "boolean", "title": "Allow this call", "default": false},
		"reason": map[string]any{"type": "string", "title": "Reason", "description": "why not, if you refuse: the program is told"},
	},
	"required": []string{"allow"},
}

// heldSlot is the run slot a call of run_python holds: its approvals give
// it back while the user decides.
type heldSlot struct {
	slots chan struct{}
	mu    sync.Mutex
	held  bool
}

// release gives the slot back, if held.
func (s *heldSlot) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held {
		s.held = false
		<-s.slots
	}
}

// retake takes a slot again, waiting for one; false when ctx ends first.
func (s *heldSlot) retake(ctx context.Context) bool {
	select {
	case s.slots <- struct{}{}:
	case <-ctx.Done():
		return false
	}
	s.mu.Lock()
	s.held = true
	s.mu.Unlock()
	return true
}

// approval returns the Request.Approval of a call of run_python from
// session ss (nil: none to ask), holding slot.
func approval(ss *mcp.ServerSession, slot *heldSlot) spine.ApprovalFunc {
	return func(ctx context.Context, call spine.ApprovalCall) error {
		if ss == nil {
			return fmt.Errorf("tool call refused: %s, and this MCP request has no session to ask its user through", call.Reason)
		}
		p := ss.InitializeParams()
		if p == nil || p.Capabilities == nil || p.Capabilities.Elicitation == nil {
			return fmt.Errorf("tool call refused: %s, and this MCP client cannot ask its user (it declares no elicitation capability)", call.Reason)
		}
		if p.ProtocolVersion >= sessionless {
			return fmt.Errorf("tool call refused: %s, and this MCP client speaks protocol version %s, on which a server asks the user only through input requests answered by a retried call, which %s does not make", call.Reason, p.ProtocolVersion, ToolName)
		}
		args := string(call.Args)
		if len(args) > maxShownArgs {
			args = args[:maxShownArgs] + "…"
		}
		slot.release()
		res, err := ss.Elicit(ctx, &mcp.ElicitParams{
			Mode:            "form",
			Message:         fmt.Sprintf("A program run by %s wants to call %s with %s. %s. Allow it?", ToolName, call.Tool, args, call.Reason),
			RequestedSchema: approvalSchema,
		})
		if !slot.retake(ctx) {
			return ctx.Err()
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("tool call refused: %s, and asking the MCP client's user failed: %v", call.Reason, err)
		}
		return decision(res)
	}
}

// decision is the user's answer as Request.Approval returns it.
func decision(res *mcp.ElicitResult) error {
	switch res.Action {
	case "accept":
		if allow, _ := res.Content["allow"].(bool); allow {
			return nil
		}
		if reason, _ := res.Content["reason"].(string); reason != "" {
			return errors.New(reason)
		}
		return errors.New("the user refused the call")
	case "decline":
		return errors.New("the user declined the call")
	default:
		return errors.New("the user dismissed the question without deciding: the call is refused")
	}
}
