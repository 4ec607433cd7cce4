package mcpserver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/codemode"
)

// A call the Runner's Options.Approve defers to a person (spine.ErrAsk) is
// asked of the client's user through MCP elicitation (a form: allow or
// not, and why): during run_python's call (ServerSession.Elicit), or, on
// 2026-07-28 and later, by input requests and a retried call (below). The
// run's slot is free meanwhile, its time limit runs on; at most as many
// runs as there are slots wait so (heldSlot), past that a deferred call is
// refused. A client that
// declares no elicitation has the call refused, the message saying why:
// the program's call raises PermissionError with it.

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
// it back while the user decides, taking one of the places of the runs
// that wait so (waiting, as many as there are slots). When none is free
// the call is refused without asking: a run that waits keeps its Guest,
// and without the bound a client could start runs that ask and never
// answer, each taking a slot only until it asks, until their Guests fill
// the memory (their time limit ends them, not before). Waiting with its
// slot instead would leave the runs answered first no slot to go on in.
type heldSlot struct {
	slots   chan struct{}
	waiting chan struct{}
	mu      sync.Mutex
	held    bool
	waits   bool // holds a place of waiting in place of its slot
}

// pause gives the slot back while the run waits for the user, taking a
// place among the waiting runs; false when none is free.
func (s *heldSlot) pause() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case s.waiting <- struct{}{}:
	default:
		return false
	}
	s.waits = true
	if s.held {
		s.held = false
		<-s.slots
	}
	return true
}

// tooManyWaiting is the refusal of a call when every place among the
// waiting runs is taken.
func tooManyWaiting(call spine.ApprovalCall, places int) error {
	return fmt.Errorf("tool call refused: %s, and %d runs already wait for their users' answers, the most there may be (as many as run slots)", call.Reason, places)
}

// release gives back the slot, if held, and the place among the waiting
// runs, as the call ends.
func (s *heldSlot) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held {
		s.held = false
		<-s.slots
	}
	if s.waits {
		s.waits = false
		<-s.waiting
	}
}

// retake takes a slot again after pause, waiting for one, and gives back
// its place among the waiting runs; false when ctx ends first.
func (s *heldSlot) retake(ctx context.Context) bool {
	select {
	case s.slots <- struct{}{}:
	case <-ctx.Done():
		return false
	}
	s.mu.Lock()
	s.held = true
	if s.waits {
		s.waits = false
		<-s.waiting
	}
	s.mu.Unlock()
	return true
}

// approval makes the Request.Approval of a call of run_python from session
// ss (nil: none to ask), holding a slot: it asks the user through ss.Elicit.
func approval(ss *mcp.ServerSession) func(*heldSlot) spine.ApprovalFunc {
	return func(slot *heldSlot) spine.ApprovalFunc { return elicit(ss, slot) }
}

// elicit is approval's Request.Approval.
func elicit(ss *mcp.ServerSession, slot *heldSlot) spine.ApprovalFunc {
	return func(ctx context.Context, call spine.ApprovalCall) error {
		if ss == nil {
			return fmt.Errorf("tool call refused: %s, and this MCP request has no session to ask its user through", call.Reason)
		}
		p := ss.InitializeParams()
		if p == nil || p.Capabilities == nil || p.Capabilities.Elicitation == nil {
			return fmt.Errorf("tool call refused: %s, and this MCP client cannot ask its user (it declares no elicitation capability)", call.Reason)
		}
		if !slot.pause() {
			return tooManyWaiting(call, cap(slot.waiting))
		}
		res, err := ss.Elicit(ctx, question(call))
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

// question is the form that asks the user about call.
//
// Arguments past maxShownArgs are cut, and the question says so, with how
// much it leaves out: the program chooses its arguments and their keys'
// order, and could otherwise put what matters past the cut, behind an
// ellipsis the user would take for padding.
func question(call spine.ApprovalCall) *mcp.ElicitParams {
	args := string(call.Args)
	if len(args) > maxShownArgs {
		cut := maxShownArgs
		for cut > 0 && !utf8.RuneStart(args[cut]) {
			cut-- // not within a character
		}
		args = fmt.Sprintf("%s… (only the first %d of the arguments' %d bytes are shown: %d are not)", args[:cut], cut, len(args), len(args)-cut)
	}
	return &mcp.ElicitParams{
		Mode:            "form",
		Message:         fmt.Sprintf("A program run by %s wants to call %s with %s. %s. Allow it?", ToolName, call.Tool, args, call.Reason),
		RequestedSchema: approvalSchema,
	}
}

// decision is the user's answer as Request.Approval returns it.
func decision(res *mcp.ElicitResult) error {
	switch res.Action {
	case "accept":
		allow, ok := res.Content["allow"].(bool)
		if !ok {
			return errors.New(`the user's answer has no boolean "allow": the call is refused`)
		}
		if allow {
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

// On protocol version 2026-07-28 and later a server cannot send a request
// to its client while it serves one: it asks by answering the call with
// input requests (an ElicitParams) and a request state, and the client
// calls again with the answers and the state. A call whose program waits
// for the user's approval so answers, its run going on in the background,
// holding its Guest but no run slot; the retried call (the state names it)
// hands the answer to the run and waits for what comes next: another
// question, or the end. The run's time limit (--timeout) bounds the wait:
// a client that never calls again has the run stopped then.

// askingCall is a call of run_python whose run may wait for the user's
// answer by input request.
type askingCall struct {
	owner     string                  // who may continue it (ownerOf)
	questions chan spine.ApprovalCall // the run's approvals, to ask
	answers   chan error              // the user's decisions, as Request.Approval returns them
	done      chan callResult         // the run's answer, once
	stop      context.CancelFunc      // ends the run
	state     string                  // its state while it waits for an answer; under handler.mu
}

type callResult struct {
	res *mcp.CallToolResult
	err error
}

// asksByInputRequests reports whether the client of ss is asked through
// input requests: it takes elicitation and speaks 2026-07-28 or later.
func asksByInputRequests(ss *mcp.ServerSession) bool {
	if ss == nil {
		return false
	}
	p := ss.InitializeParams()
	return p != nil && p.Capabilities != nil && p.Capabilities.Elicitation != nil && p.ProtocolVersion >= sessionless
}

// callAsking serves a call from a client asked through input requests: a
// new call starts its run in the background, a retried one (with a request
// state) hands the user's answer to the run it names; then both wait for
// the run's next question or its end.
func (h *handler) callAsking(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	owner := ""
	if req.Extra != nil {
		owner = ownerOf(req.Extra.Header)
	}
	if state := req.Params.RequestState; state != "" {
		h.mu.Lock()
		c := h.asking[state]
		if c != nil && c.owner == owner {
			delete(h.asking, state)
			c.state = ""
		}
		h.mu.Unlock()
		if c == nil || c.owner != owner {
			return toolResult(codemode.Failed("the run this call continues is no more: it was answered already, or ended at its time limit or with the server; call " + ToolName + " again"))
		}
		answer := errors.New("the client sent no answer to the question: the call is refused")
		if res, ok := req.Params.InputResponses[approvalKey].(*mcp.ElicitResult); ok {
			answer = decision(res)
		}
		c.answers <- answer
		return h.await(ctx, c)
	}
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	c := &askingCall{owner: owner, questions: make(chan spine.ApprovalCall), answers: make(chan error, 1), done: make(chan callResult, 1), stop: stop}
	go func() {
		defer stop()
		res, err := h.run(runCtx, req, c.approval)
		h.mu.Lock()
		if c.state != "" { // nobody came back for it
			delete(h.asking, c.state)
		}
		h.mu.Unlock()
		c.done <- callResult{res, err}
	}()
	return h.await(ctx, c)
}

// approvalKey is the key of the question among a result's input requests.
const approvalKey = "approval"

// await answers a call with c's next question, under a new request state,
// or its end. A client that goes away first stops the run.
func (h *handler) await(ctx context.Context, c *askingCall) (*mcp.CallToolResult, error) {
	select {
	case call := <-c.questions:
		var b [16]byte
		rand.Read(b[:])
		state := hex.EncodeToString(b[:])
		h.mu.Lock()
		c.state, h.asking[state] = state, c
		h.mu.Unlock()
		return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{approvalKey: question(call)}, RequestState: state}, nil
	case r := <-c.done:
		return r.res, r.err
	case <-ctx.Done():
		c.stop()
		r := <-c.done
		return r.res, r.err
	}
}

// approval is the Request.Approval of c's run, holding slot: it hands the
// call to the request waiting on c, and waits for the user's answer.
func (c *askingCall) approval(slot *heldSlot) spine.ApprovalFunc {
	return func(ctx context.Context, call spine.ApprovalCall) error {
		if !slot.pause() {
			return tooManyWaiting(call, cap(slot.waiting))
		}
		var answer error
		select {
		case c.questions <- call:
			select {
			case answer = <-c.answers:
			case <-ctx.Done():
			}
		case <-ctx.Done():
		}
		if !slot.retake(ctx) || ctx.Err() != nil {
			return ctx.Err()
		}
		return answer
	}
}
