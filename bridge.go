package spine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/tetratelabs/wazero/api"

	"github.com/spine-run/spine/internal/abi"
)

// Tool runs on the Host. args is Go-owned; no borrowed Guest memory escapes.
// Treat args as read-only; the run also retains them for Future matching.
type Tool func(ctx context.Context, args json.RawMessage) (any, error)

// ToolSpec binds a Python-visible tool name to its Host implementation.
// Early-read tools must return a stable snapshot for the run and honor ctx.
type ToolSpec struct {
	Call           Tool
	AllowEarlyRead bool

	// Description is shown by help(tool) and tool.__doc__ in the Guest.
	// It never changes how a call is dispatched.
	Description string

	// InputSchema is the JSON Schema of the tool's arguments (an object
	// schema), used for the tool's Python stub and for the Guest's checks of
	// a call's arguments (see Stub): its properties, in the order written,
	// are the parameters a program may pass positionally or by keyword. It
	// never changes how a call is dispatched, and the Host does not validate
	// arguments against it (ValidateArguments makes a spec that does).
	InputSchema json.RawMessage

	// KeywordOnly says the order of InputSchema's properties is no order a
	// program may rely on: every argument must then be passed by keyword,
	// and the stub shows "*," before the parameters. mcpclient sets it when
	// the server's order was lost.
	KeywordOnly bool

	// OutputSchema is the JSON Schema of the tool's value, used for the
	// return type of its Python stub (Any without one). Like InputSchema, it
	// never changes how a call is dispatched, and the Host does not check
	// values against it.
	OutputSchema json.RawMessage
}

// Manifest is copied by New and injected into each Guest execution.
type Manifest map[string]ToolSpec

type callRequest struct {
	Tool string          `json:"tool"`
	Args json.RawMessage `json:"args"`
}

// maxMessage caps every tool request and response crossing the bridge.
const maxMessage = abi.MaxMessage

func readRequest(m api.Module, ptr, size uint32) (callRequest, error) {
	var request callRequest
	data, ok := m.Memory().Read(ptr, size)
	if !ok || size > maxMessage {
		return request, errors.New("tool request outside ABI bounds")
	}
	err := json.Unmarshal(data, &request)
	return request, err
}

func encodeResponse(value any, err error) []byte {
	response := struct {
		Value any     `json:"value"`
		Error *string `json:"error,omitempty"`
		// Type is the Python exception the Guest raises for the error:
		// "PermissionError" for a call Options.Approve refused, "TypeError"
		// for an *ArgumentError; left out for every other error, which raises
		// RuntimeError.
		Type string `json:"type,omitempty"`
	}{Value: value}
	if err != nil {
		response.Value = nil
		message := err.Error()
		response.Error = &message
		var argErr *ArgumentError
		if _, refused := err.(*refusedError); refused { // approve's own error, never wrapped
			response.Type = "PermissionError"
		} else if errors.As(err, &argErr) {
			response.Type = "TypeError"
		}
	}
	encoded, err := json.Marshal(response)
	if err != nil {
		encoded, _ = json.Marshal(map[string]string{"error": "tool result is not JSON: " + err.Error()})
	}
	return encoded
}

// invoke makes the program's call of request in the run ctx carries: it
// spends one of the run's calls, asks Options.Approve, runs the tool, and
// records the call (span, Output.Calls, log).
func (r *Runner) invoke(ctx context.Context, request callRequest) []byte {
	st := runOf(ctx)
	if isDiscovery(request.Tool) {
		return st.discover(request) // the Guest's builtin tools, not a tool of the manifest
	}
	if err := st.spend(); err != nil {
		st.limitOnce(&st.loggedBudget, "MaxToolCalls")
		return encodeResponse(nil, err)
	}
	start := time.Now()
	ctx, span := st.startTool(ctx, request.Tool, false)
	var response []byte
	spec, ok := st.tool(request.Tool)
	var err error
	asked := request
	if !ok {
		err = fmt.Errorf("unknown tool: %s", request.Tool)
	} else {
		request.Args, err = st.approve(ctx, request, false)
	}
	if err != nil {
		response = encodeResponse(nil, err)
	} else {
		n, callCtx := st.own(ctx, request.Tool)
		st.wait(n, asked, 0)
		response, err = callTool(callCtx, request.Tool, spec.Call, request.Args)
	}
	if span != nil {
		toolFailed(span, err)
		span.End()
	}
	st.called(request.Tool, start, time.Since(start), false, err)
	return response
}

func (r *Runner) hostCall(ctx context.Context, m api.Module, ptr, size, out, capacity uint32) uint32 {
	request, err := readRequest(m, ptr, size)
	var response []byte
	if err != nil {
		response = encodeResponse(nil, err)
	} else if st := runOf(ctx); st.replay != nil && !isDiscovery(request.Tool) {
		response = st.replayed(ctx, request) // a replay: the record answers
	} else if st.rec != nil && !isDiscovery(request.Tool) {
		response = st.invokeNoted(ctx, request)
	} else {
		response = r.invoke(ctx, request)
	}
	return writeResponse(m, out, capacity, response)
}

func (r *Runner) hostPrepare(ctx context.Context, m api.Module, ptr, size uint32) uint32 {
	request, err := readRequest(m, ptr, size)
	if err != nil {
		return abi.NotPrepared
	}
	return runOf(ctx).prepare(request)
}

func (r *Runner) hostResolve(ctx context.Context, m api.Module, id, ptr, size, out, capacity uint32) uint32 {
	request, err := readRequest(m, ptr, size)
	var response []byte
	if err != nil {
		response = encodeResponse(nil, err)
	} else {
		response = runOf(ctx).resolve(id, request)
	}
	return writeResponse(m, out, capacity, response)
}

// hostPeek answers the Guest's peek(id, out, capacity): the length of the
// finished read's response written at out, abi.PeekRunning or
// abi.PeekNone; abi.Failed when the response does not fit. With
// capacity 0 the Guest only asks to be woken when the read finishes: a read
// that has finished already wakes it at the next tick. id 0 asks for a wake at
// the next tick (the Guest's chain step found its table in use).
func (r *Runner) hostPeek(ctx context.Context, m api.Module, id, out, capacity uint32) uint32 {
	st := runOf(ctx)
	if id == 0 {
		st.wake.Store(true)
		return abi.PeekNone
	}
	response, state := st.peek(id, capacity)
	switch {
	case state == peekNone:
		return abi.PeekNone
	case state == peekRunning:
		return abi.PeekRunning
	case capacity == 0:
		st.wake.Store(true)
		return abi.PeekRunning
	}
	return writeResponse(m, out, capacity, response)
}

// writeResponse copies response into the Guest at out. The whole buffer the
// Guest offered, out to out+capacity, must lie in its memory and the response
// must fit in it; otherwise nothing is written and the Guest gets abi.Failed.
func writeResponse(m api.Module, out, capacity uint32, response []byte) uint32 {
	if uint64(out)+uint64(capacity) > uint64(m.Memory().Size()) || uint64(len(response)) > uint64(capacity) {
		return abi.Failed
	}
	if !m.Memory().Write(out, response) {
		return abi.Failed
	}
	return uint32(len(response))
}

// callTool runs the tool name and encodes its outcome; err is the tool's
// error, if any. A panic in either (the tool, a MarshalJSON method of its
// value, the Error method of its error) becomes the tool's error, so no tool
// can crash the Host. An *ArgumentError gets the tool's name in front, as a
// Python TypeError has its function's.
func callTool(ctx context.Context, name string, call Tool, args json.RawMessage) (response []byte, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("tool panicked: %v", p)
			response = encodeResponse(nil, err)
		}
	}()
	value, err := call(ctx, args)
	var argErr *ArgumentError
	if errors.As(err, &argErr) {
		err = &ArgumentError{Message: name + "() " + argErr.Message}
	}
	response = encodeResponse(value, err)
	if err != nil {
		// The error as the program saw it, read once: its Error method is
		// the tool's code, and may panic.
		err = errors.New(err.Error())
	}
	return response, err
}
