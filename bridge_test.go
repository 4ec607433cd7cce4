package spine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/spine-run/spine/internal/abi"
	"github.com/spine-run/spine/internal/engine"
)

// These tests drive the Host tool bridge (bridge.go) and a run's early-read
// state (runstate.go, futures.go) against the linear memory of a real wazero module: a
// hand-built wasm binary that only declares and exports a memory.

// bridgeWasm returns a valid wasm binary whose only content is one memory of
// pages 64 KiB pages (minimum, no maximum) exported as "memory".
func bridgeWasm(pages uint32) []byte {
	leb := func(v uint32) []byte {
		var b []byte
		for {
			c := byte(v & 0x7f)
			v >>= 7
			if v != 0 {
				b = append(b, c|0x80)
				continue
			}
			return append(b, c)
		}
	}
	section := func(id byte, payload []byte) []byte {
		return append(append([]byte{id}, leb(uint32(len(payload)))...), payload...)
	}
	bin := []byte{0x00, 'a', 's', 'm', 0x01, 0x00, 0x00, 0x00}
	// Memory section: one memory, limits flag 0 (min only), min = pages.
	bin = append(bin, section(0x05, append([]byte{0x01, 0x00}, leb(pages)...))...)
	// Export section: one export, "memory", kind memory (0x02), index 0.
	exp := append([]byte{0x01, byte(len("memory"))}, "memory"...)
	exp = append(exp, 0x02, 0x00)
	bin = append(bin, section(0x07, exp)...)
	return bin
}

// bridgeModule instantiates bridgeWasm(pages) in its own runtime, closed at cleanup.
func bridgeModule(tb testing.TB, pages uint32) api.Module {
	tb.Helper()
	ctx := context.Background()
	rt := wazero.NewRuntime(ctx)
	tb.Cleanup(func() { rt.Close(context.Background()) })
	mod, err := rt.Instantiate(ctx, bridgeWasm(pages))
	if err != nil {
		tb.Fatalf("instantiate test module: %v", err)
	}
	if got, want := mod.Memory().Size(), pages*engine.WasmPageSize; got != want {
		tb.Fatalf("memory size = %d, want %d", got, want)
	}
	return mod
}

// bridgeRunner is a Runner with only what the bridge uses: manifest and opts.
func bridgeRunner(manifest Manifest, o *Options) *Runner {
	return &Runner{manifest: manifest, opts: o.withDefaults()}
}

// bridgeRun starts a run's state on r; it is closed at cleanup.
func bridgeRun(tb testing.TB, r *Runner, early bool) *runState {
	tb.Helper()
	st := newRunState(r, context.Background(), early)
	tb.Cleanup(st.close)
	return st
}

// bridgeMemory returns a copy of all of mod's memory.
func bridgeMemory(tb testing.TB, mod api.Module) []byte {
	tb.Helper()
	view, ok := mod.Memory().Read(0, mod.Memory().Size())
	if !ok {
		tb.Fatal("cannot read the whole memory")
	}
	return bytes.Clone(view)
}

// bridgePut writes data at ptr and returns its size.
func bridgePut(tb testing.TB, mod api.Module, ptr uint32, data string) uint32 {
	tb.Helper()
	if !mod.Memory().Write(ptr, []byte(data)) {
		tb.Fatalf("cannot write %d bytes at %#x", len(data), ptr)
	}
	return uint32(len(data))
}

// bridgeGet returns a copy of n bytes at ptr.
func bridgeGet(tb testing.TB, mod api.Module, ptr, n uint32) string {
	tb.Helper()
	data, ok := mod.Memory().Read(ptr, n)
	if !ok {
		tb.Fatalf("cannot read %d bytes at %#x", n, ptr)
	}
	return string(data)
}

// A one-page module's layout in these tests.
const (
	bridgeReq = 0x0100 // where requests are written
	bridgeOut = 0x8000 // the response buffer offered to the Host
	bridgeCap = 0x4000 // its capacity
)

// counter is a tool that counts its calls and returns value (or err).
type counter struct {
	n     atomic.Int32
	value any
	err   error
	mu    sync.Mutex
	args  []string
}

func (c *counter) call(ctx context.Context, args json.RawMessage) (any, error) {
	c.n.Add(1)
	c.mu.Lock()
	c.args = append(c.args, string(args))
	c.mu.Unlock()
	return c.value, c.err
}

func (c *counter) calls() int { return int(c.n.Load()) }

// --- readRequest -----------------------------------------------------------

func TestBridgeReadRequestBounds(t *testing.T) {
	small := bridgeModule(t, 1) // 64 KiB
	big := bridgeModule(t, 20)  // 1.25 MiB, so a request over maxMessage still fits in memory
	const page = engine.WasmPageSize
	for _, tc := range []struct {
		name      string
		mod       api.Module
		ptr, size uint32
	}{
		{"ptr at end", small, page, 1},
		{"ptr beyond memory", small, page + 100, 2},
		{"ptr beyond memory, size 0", small, page + 1, 0},
		{"ptr max", small, math.MaxUint32, 1},
		{"ptr+size past end", small, page - 10, 11},
		{"size past end", small, 0, page + 1},
		{"ptr+size overflows uint32", small, 0xFFFFFFF0, 0x20},
		{"size max", small, 1, math.MaxUint32},
		{"size over maxMessage inside memory", big, 0, maxMessage + 1},
		{"size over maxMessage at offset", big, 100, maxMessage + 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := readRequest(tc.mod, tc.ptr, tc.size)
			if err == nil || err.Error() != "tool request outside ABI bounds" {
				t.Fatalf("err = %v, want tool request outside ABI bounds", err)
			}
			if req.Tool != "" || req.Args != nil {
				t.Fatalf("request = %+v, want zero", req)
			}
		})
	}
}

func TestBridgeReadRequestMaxMessage(t *testing.T) {
	// Exactly maxMessage bytes is allowed: a request padded with spaces to 1 MiB.
	mod := bridgeModule(t, 20)
	body := `{"tool":"lookup","args":{"key":"book"}}`
	data := body + strings.Repeat(" ", maxMessage-len(body))
	size := bridgePut(t, mod, 10, data)
	if size != maxMessage {
		t.Fatalf("size = %d", size)
	}
	req, err := readRequest(mod, 10, size)
	if err != nil {
		t.Fatalf("readRequest at maxMessage: %v", err)
	}
	if req.Tool != "lookup" || string(req.Args) != `{"key":"book"}` {
		t.Fatalf("request = %q %s", req.Tool, req.Args)
	}
	// The whole of a one-page memory (under maxMessage) is readable too.
	small := bridgeModule(t, 1)
	bridgePut(t, small, 0, `{"tool":"x"}`)
	if _, err := readRequest(small, 0, engine.WasmPageSize); err == nil {
		t.Fatal("trailing NUL bytes accepted as JSON")
	} else if err.Error() == "tool request outside ABI bounds" {
		t.Fatalf("whole memory reported out of bounds: %v", err)
	}
	bridgePut(t, small, engine.WasmPageSize-12, `{"tool":"x"}`)
	req, err = readRequest(small, engine.WasmPageSize-12, 12)
	if err != nil || req.Tool != "x" {
		t.Fatalf("request at the very end of memory: %+v, %v", req, err)
	}
}

func TestBridgeReadRequestJSON(t *testing.T) {
	mod := bridgeModule(t, 1)
	for _, tc := range []struct {
		name     string
		data     string
		tool     string
		args     string // "" means nil Args
		errorMsg string // "" means success
	}{
		{"valid", `{"tool":"lookup","args":{"key":"book"}}`, "lookup", `{"key":"book"}`, ""},
		{"whitespace kept in args", `{"tool":"t","args": { "a" : [1, 2] } }`, "t", `{ "a" : [1, 2] }`, ""},
		{"no args", `{"tool":"t"}`, "t", "", ""},
		{"null args", `{"tool":"t","args":null}`, "t", "null", ""},
		{"scalar args", `{"tool":"t","args":7}`, "t", "7", ""},
		{"unknown field ignored", `{"tool":"t","x":1,"args":[]}`, "t", "[]", ""},
		{"empty tool", `{"tool":"","args":{}}`, "", "{}", ""},
		{"escaped tool", `{"tool":"a\u0062c"}`, "abc", "", ""},
		{"empty", ``, "", "", "unexpected end of JSON input"},
		{"truncated", `{"tool":"t","args":{`, "", "", "unexpected end of JSON input"},
		{"garbage", `xyz`, "", "", "invalid character 'x' looking for beginning of value"},
		{"trailing data", `{"tool":"t"} {}`, "", "", "invalid character '{' after top-level value"},
		{"NUL", "\x00", "", "", "invalid character '\\x00' looking for beginning of value"},
		{"array", `[1]`, "", "", "json: cannot unmarshal array into Go value of type spine.callRequest"},
		{"tool not a string", `{"tool":1}`, "", "", "json: cannot unmarshal number into Go struct field callRequest.tool of type string"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clear(bridgeMemoryView(t, mod))
			size := bridgePut(t, mod, bridgeReq, tc.data)
			req, err := readRequest(mod, bridgeReq, size)
			if tc.errorMsg != "" {
				if err == nil || err.Error() != tc.errorMsg {
					t.Fatalf("err = %v, want %q", err, tc.errorMsg)
				}
				return
			}
			if err != nil {
				t.Fatalf("readRequest: %v", err)
			}
			if req.Tool != tc.tool {
				t.Errorf("Tool = %q, want %q", req.Tool, tc.tool)
			}
			if tc.args == "" {
				if req.Args != nil {
					t.Errorf("Args = %q, want nil", req.Args)
				}
			} else if string(req.Args) != tc.args {
				t.Errorf("Args = %q, want %q", req.Args, tc.args)
			}
		})
	}
}

// bridgeMemoryView is the live view of all of mod's memory.
func bridgeMemoryView(tb testing.TB, mod api.Module) []byte {
	tb.Helper()
	view, ok := mod.Memory().Read(0, mod.Memory().Size())
	if !ok {
		tb.Fatal("cannot read the whole memory")
	}
	return view
}

func TestBridgeReadRequestArgsAreCopied(t *testing.T) {
	mod := bridgeModule(t, 1)
	size := bridgePut(t, mod, bridgeReq, `{"tool":"lookup","args":{"key":"book"}}`)
	req, err := readRequest(mod, bridgeReq, size)
	if err != nil {
		t.Fatal(err)
	}
	// The Guest reuses its buffer: overwrite the request in place.
	bridgePut(t, mod, bridgeReq, strings.Repeat("X", int(size)))
	if req.Tool != "lookup" || string(req.Args) != `{"key":"book"}` {
		t.Fatalf("request changed with Guest memory: %q %q", req.Tool, req.Args)
	}
	// And the other way: changing Args does not write into the Guest.
	for i := range req.Args {
		req.Args[i] = 'Y'
	}
	if got := bridgeGet(t, mod, bridgeReq, size); got != strings.Repeat("X", int(size)) {
		t.Fatalf("Args aliases Guest memory: %q", got)
	}
}

// --- encodeResponse --------------------------------------------------------

type panicMarshaler struct{}

func (panicMarshaler) MarshalJSON() ([]byte, error) { panic("marshal boom") }

type errMarshaler struct{}

func (errMarshaler) MarshalJSON() ([]byte, error) { return nil, errors.New("no way") }

func TestBridgeEncodeResponse(t *testing.T) {
	for _, tc := range []struct {
		name  string
		value any
		err   error
		want  string
	}{
		{"int", 21, nil, `{"value":21}`},
		{"nil nil", nil, nil, `{"value":null}`},
		{"string", "book", nil, `{"value":"book"}`},
		{"object", map[string]any{"b": []int{1, 2}, "a": true}, nil, `{"value":{"a":true,"b":[1,2]}}`},
		{"error", nil, errors.New("key not found: book"), `{"value":null,"error":"key not found: book"}`},
		{"error drops value", 21, errors.New("boom"), `{"value":null,"error":"boom"}`},
		{"error text escaped", nil, errors.New("a \"q\" <b>\n"), `{"value":null,"error":"a \"q\" \u003cb\u003e\n"}`},
		{"empty error text", nil, errors.New(""), `{"value":null,"error":""}`},
		{"raw message", json.RawMessage(`{"a":[1,2]}`), nil, `{"value":{"a":[1,2]}}`},
		{"raw message compacted", json.RawMessage(" { \"a\" : [1, 2] } "), nil, `{"value":{"a":[1,2]}}`},
		{"raw null", json.RawMessage(`null`), nil, `{"value":null}`},
		{"channel", make(chan int), nil, `{"error":"tool result is not JSON: json: unsupported type: chan int"}`},
		{"func", func() {}, nil, `{"error":"tool result is not JSON: json: unsupported type: func()"}`},
		{"+Inf", math.Inf(1), nil, `{"error":"tool result is not JSON: json: unsupported value: +Inf"}`},
		{"NaN nested", map[string]float64{"x": math.NaN()}, nil, `{"error":"tool result is not JSON: json: unsupported value: NaN"}`},
		{"invalid raw message", json.RawMessage(`{`), nil, `{"error":"tool result is not JSON: json: error calling MarshalJSON for type json.RawMessage: unexpected end of JSON input"}`},
		{"marshaler error", errMarshaler{}, nil, `{"error":"tool result is not JSON: json: error calling MarshalJSON for type spine.errMarshaler: no way"}`},
		{"unencodable value with error", make(chan int), errors.New("boom"), `{"value":null,"error":"boom"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(encodeResponse(tc.value, tc.err)); got != tc.want {
				t.Fatalf("encodeResponse = %s\n                  want %s", got, tc.want)
			}
		})
	}
}

// --- invoke and hostCall ---------------------------------------------------

type bridgeCtxKey struct{}

// bridgeTools is a manifest covering every tool outcome; lookup counts its calls.
func bridgeTools(lookup *counter) Manifest {
	return Manifest{
		"lookup": {Call: lookup.call},
		"fail": {Call: func(context.Context, json.RawMessage) (any, error) {
			return nil, errors.New("key not found: x")
		}},
		"nilnil": {Call: func(context.Context, json.RawMessage) (any, error) { return nil, nil }},
		"inf":    {Call: func(context.Context, json.RawMessage) (any, error) { return math.Inf(-1), nil }},
		"chan":   {Call: func(context.Context, json.RawMessage) (any, error) { return make(chan int), nil }},
		"echo":   {Call: func(_ context.Context, args json.RawMessage) (any, error) { return args, nil }},
		"panic":  {Call: func(context.Context, json.RawMessage) (any, error) { panic("boom") }},
		"panicerr": {Call: func(context.Context, json.RawMessage) (any, error) {
			panic(errors.New("bad state"))
		}},
		"panicnil": {Call: func(context.Context, json.RawMessage) (any, error) { panic(nil) }},
		"ctx": {Call: func(ctx context.Context, _ json.RawMessage) (any, error) {
			return ctx.Value(bridgeCtxKey{}), nil
		}},
		"big": {Call: func(context.Context, json.RawMessage) (any, error) {
			return strings.Repeat("z", bridgeCap), nil
		}},
	}
}

func TestBridgeInvoke(t *testing.T) {
	for _, tc := range []struct {
		name    string
		tool    string
		args    string
		want    string
		lookups int
	}{
		{"lookup", "lookup", `{"key":"book"}`, `{"value":21}`, 1},
		{"empty name", "", `{}`, `{"value":null,"error":"unknown tool: "}`, 0},
		{"unknown", "nope", `{"key":"book"}`, `{"value":null,"error":"unknown tool: nope"}`, 0},
		{"no fuzzy match", "Lookup", `{}`, `{"value":null,"error":"unknown tool: Lookup"}`, 0},
		{"no prefix match", "lookup ", `{}`, `{"value":null,"error":"unknown tool: lookup "}`, 0},
		{"unknown name escaped", "<x>", `{}`, `{"value":null,"error":"unknown tool: \u003cx\u003e"}`, 0},
		{"tool error", "fail", `{}`, `{"value":null,"error":"key not found: x"}`, 0},
		{"nil nil", "nilnil", `{}`, `{"value":null}`, 0},
		{"unencodable inf", "inf", `{}`, `{"error":"tool result is not JSON: json: unsupported value: -Inf"}`, 0},
		{"unencodable chan", "chan", `{}`, `{"error":"tool result is not JSON: json: unsupported type: chan int"}`, 0},
		{"echo raw args", "echo", `{"k":[1, 2]}`, `{"value":{"k":[1,2]}}`, 0},
		{"panic", "panic", `{}`, `{"value":null,"error":"tool panicked: boom"}`, 0},
		{"panic error", "panicerr", `{}`, `{"value":null,"error":"tool panicked: bad state"}`, 0},
		{"panic nil", "panicnil", `{}`, `{"value":null,"error":"tool panicked: ` + new(runtime.PanicNilError).Error() + `"}`, 0},
		{"ctx passed", "ctx", `{}`, `{"value":"run ctx"}`, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lookup := &counter{value: 21}
			r := bridgeRunner(bridgeTools(lookup), nil)
			st := newRunState(r, context.WithValue(context.Background(), bridgeCtxKey{}, "run ctx"), false)
			defer st.close()
			got := string(r.invoke(st.ctx, callRequest{Tool: tc.tool, Args: json.RawMessage(tc.args)}))
			if got != tc.want {
				t.Fatalf("invoke = %s\n        want %s", got, tc.want)
			}
			if lookup.calls() != tc.lookups {
				t.Fatalf("lookup called %d times, want %d", lookup.calls(), tc.lookups)
			}
			if tc.lookups == 1 && lookup.args[0] != tc.args {
				t.Fatalf("lookup got args %q, want %q", lookup.args[0], tc.args)
			}
		})
	}
}

func TestBridgeInvokeNothingCalledForUnknownTool(t *testing.T) {
	// Every tool of the manifest counts: an unknown name must reach none of them.
	var total atomic.Int32
	manifest := Manifest{}
	for _, name := range []string{"a", "b", "lookup", "lookup2", "unknown", "default", "*"} {
		manifest[name] = ToolSpec{Call: func(context.Context, json.RawMessage) (any, error) {
			total.Add(1)
			return 1, nil
		}}
	}
	r := bridgeRunner(manifest, nil)
	for _, name := range []string{"", "A", "c", "look", "lookup3", "*x", " a", "a\x00", "unknown tool: a"} {
		got := string(r.invoke(bridgeRun(t, r, false).ctx, callRequest{Tool: name, Args: json.RawMessage(`{}`)}))
		message, _ := json.Marshal("unknown tool: " + name)
		want := `{"value":null,"error":` + string(message) + `}`
		if got != want {
			t.Errorf("invoke(%q) = %s, want %s", name, got, want)
		}
	}
	if n := total.Load(); n != 0 {
		t.Fatalf("an unknown tool name reached a tool %d times", n)
	}
}

func TestBridgeHostCall(t *testing.T) {
	const page = engine.WasmPageSize
	for _, tc := range []struct {
		name     string
		request  string
		ptr      uint32 // request pointer; 0 means bridgeReq
		size     uint32 // request size; 0 means len(request)
		out, cap uint32
		want     string // written response; "" means nothing written
		result   uint32 // expected return; 0 means len(want)
		lookups  int
	}{
		{name: "success", request: `{"tool":"lookup","args":{"key":"book"}}`,
			out: bridgeOut, cap: bridgeCap, want: `{"value":21}`, lookups: 1},
		{name: "capacity exactly the response", request: `{"tool":"lookup","args":{}}`,
			out: bridgeOut, cap: uint32(len(`{"value":21}`)), want: `{"value":21}`, lookups: 1},
		{name: "buffer ends at memory end", request: `{"tool":"lookup","args":{}}`,
			out: page - 12, cap: 12, want: `{"value":21}`, lookups: 1},
		{name: "unknown tool", request: `{"tool":"nope","args":{}}`,
			out: bridgeOut, cap: bridgeCap, want: `{"value":null,"error":"unknown tool: nope"}`},
		{name: "empty tool name", request: `{"args":{}}`,
			out: bridgeOut, cap: bridgeCap, want: `{"value":null,"error":"unknown tool: "}`},
		{name: "tool error", request: `{"tool":"fail"}`,
			out: bridgeOut, cap: bridgeCap, want: `{"value":null,"error":"key not found: x"}`},
		{name: "nil nil", request: `{"tool":"nilnil"}`,
			out: bridgeOut, cap: bridgeCap, want: `{"value":null}`},
		{name: "unencodable", request: `{"tool":"inf"}`,
			out: bridgeOut, cap: bridgeCap, want: `{"error":"tool result is not JSON: json: unsupported value: -Inf"}`},
		{name: "panic", request: `{"tool":"panic"}`,
			out: bridgeOut, cap: bridgeCap, want: `{"value":null,"error":"tool panicked: boom"}`},
		{name: "bad JSON", request: `{"tool":"lookup",`,
			out: bridgeOut, cap: bridgeCap, want: `{"value":null,"error":"unexpected end of JSON input"}`},
		{name: "request outside memory", request: `{"tool":"lookup"}`, ptr: page + 1, size: 10,
			out: bridgeOut, cap: bridgeCap, want: `{"value":null,"error":"tool request outside ABI bounds"}`},
		{name: "request past end", request: `{"tool":"lookup"}`, ptr: page - 4, size: 10,
			out: bridgeOut, cap: bridgeCap, want: `{"value":null,"error":"tool request outside ABI bounds"}`},
		{name: "request ptr+size overflow", request: `{"tool":"lookup"}`, ptr: 0xFFFFFFFF, size: 2,
			out: bridgeOut, cap: bridgeCap, want: `{"value":null,"error":"tool request outside ABI bounds"}`},
		{name: "response over capacity", request: `{"tool":"lookup","args":{}}`,
			out: bridgeOut, cap: 11, result: abi.Failed, lookups: 1},
		{name: "zero capacity", request: `{"tool":"lookup","args":{}}`,
			out: bridgeOut, cap: 0, result: abi.Failed, lookups: 1},
		{name: "big response over capacity", request: `{"tool":"big"}`,
			out: bridgeOut, cap: bridgeCap, result: abi.Failed},
		{name: "error envelope over capacity", request: `xx`,
			out: bridgeOut, cap: 8, result: abi.Failed},
		{name: "out outside memory", request: `{"tool":"lookup","args":{}}`,
			out: page, cap: 100, result: abi.Failed, lookups: 1},
		{name: "out far outside memory", request: `{"tool":"lookup","args":{}}`,
			out: 0xFFFFFFF0, cap: 100, result: abi.Failed, lookups: 1},
		{name: "out+capacity past end though response fits", request: `{"tool":"lookup","args":{}}`,
			out: page - 100, cap: 101, result: abi.Failed, lookups: 1},
		{name: "out+capacity overflows uint32", request: `{"tool":"lookup","args":{}}`,
			out: 16, cap: math.MaxUint32, result: abi.Failed, lookups: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mod := bridgeModule(t, 1)
			lookup := &counter{value: 21}
			r := bridgeRunner(bridgeTools(lookup), nil)
			ptr, size := tc.ptr, tc.size
			if ptr == 0 {
				ptr = bridgeReq
				size = bridgePut(t, mod, ptr, tc.request)
			}
			before := bridgeMemory(t, mod)
			got := r.hostCall(bridgeRun(t, r, false).ctx, mod, ptr, size, tc.out, tc.cap)
			after := bridgeMemory(t, mod)
			want := tc.result
			if want == 0 {
				want = uint32(len(tc.want))
			}
			if got != want {
				t.Fatalf("hostCall = %#x, want %#x", got, want)
			}
			if tc.want == "" {
				if !bytes.Equal(before, after) {
					t.Fatal("memory changed although the response was not written")
				}
			} else {
				if written := string(after[tc.out : tc.out+got]); written != tc.want {
					t.Fatalf("wrote %s, want %s", written, tc.want)
				}
				// Nothing outside [out, out+len) changed.
				copy(before[tc.out:], tc.want)
				if !bytes.Equal(before, after) {
					t.Fatal("memory changed outside the response")
				}
			}
			if lookup.calls() != tc.lookups {
				t.Fatalf("lookup called %d times, want %d", lookup.calls(), tc.lookups)
			}
		})
	}
}

func TestBridgeWriteResponse(t *testing.T) {
	const page = engine.WasmPageSize
	resp := []byte(`{"value":21}`)
	for _, tc := range []struct {
		name     string
		out, cap uint32
		ok       bool
	}{
		{"fits", 100, 100, true},
		{"exact", 100, uint32(len(resp)), true},
		{"at end", page - uint32(len(resp)), uint32(len(resp)), true},
		{"one short", 100, uint32(len(resp)) - 1, false},
		{"buffer one past end", page - uint32(len(resp)), uint32(len(resp)) + 1, false},
		{"out at end", page, 0, false},
		{"out beyond", page + 1, 100, false},
		{"overflow", math.MaxUint32, 2, false},
		{"capacity max", 0, math.MaxUint32, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mod := bridgeModule(t, 1)
			before := bridgeMemory(t, mod)
			got := writeResponse(mod, tc.out, tc.cap, resp)
			after := bridgeMemory(t, mod)
			if !tc.ok {
				if got != abi.Failed {
					t.Fatalf("writeResponse = %#x, want abi.Failed", got)
				}
				if !bytes.Equal(before, after) {
					t.Fatal("memory changed on failure")
				}
				return
			}
			if got != uint32(len(resp)) || !bytes.Equal(after[tc.out:tc.out+got], resp) {
				t.Fatalf("writeResponse = %d, memory %q", got, after[tc.out:tc.out+uint32(len(resp))])
			}
		})
	}
	// An empty response fits in an empty buffer at the very end of memory.
	mod := bridgeModule(t, 1)
	if got := writeResponse(mod, page, 0, nil); got != 0 {
		t.Fatalf("empty response at end = %#x, want 0", got)
	}
}

// --- the tool-call budget --------------------------------------------------

func TestBridgeBudget(t *testing.T) {
	mod := bridgeModule(t, 1)
	lookup := &counter{value: 21}
	r := bridgeRunner(bridgeTools(lookup), &Options{MaxToolCalls: 2})
	st := bridgeRun(t, r, false)
	size := bridgePut(t, mod, bridgeReq, `{"tool":"lookup","args":{}}`)
	for i, want := range []string{
		`{"value":21}`,
		`{"value":21}`,
		`{"value":null,"error":"tool call budget exhausted"}`,
		`{"value":null,"error":"tool call budget exhausted"}`,
	} {
		n := r.hostCall(st.ctx, mod, bridgeReq, size, bridgeOut, bridgeCap)
		if n == abi.Failed {
			t.Fatalf("call %d: abi.Failed", i+1)
		}
		if got := bridgeGet(t, mod, bridgeOut, n); got != want {
			t.Fatalf("call %d = %s, want %s", i+1, got, want)
		}
	}
	if lookup.calls() != 2 || st.calls != 2 {
		t.Fatalf("lookup called %d times, st.calls = %d; want 2, 2", lookup.calls(), st.calls)
	}
	// Unknown tools count too; the budget is the run's own.
	if got := string(r.invoke(st.ctx, callRequest{Tool: "nope"})); got != `{"value":null,"error":"tool call budget exhausted"}` {
		t.Fatalf("unknown tool past the budget = %s", got)
	}
	if got := string(r.invoke(bridgeRun(t, r, false).ctx, callRequest{Tool: "lookup"})); got != `{"value":21}` {
		t.Fatalf("invoke in another run = %s", got)
	}
}

func TestBridgeBudgetCountsResolve(t *testing.T) {
	mod := bridgeModule(t, 1)
	early := &counter{value: "snap"}
	lookup := &counter{value: 21}
	manifest := bridgeTools(lookup)
	manifest["snap"] = ToolSpec{Call: early.call, AllowEarlyRead: true}
	r := bridgeRunner(manifest, &Options{MaxToolCalls: 1})
	st := bridgeRun(t, r, true)

	size := bridgePut(t, mod, bridgeReq, `{"tool":"snap","args":{}}`)
	id := r.hostPrepare(st.ctx, mod, bridgeReq, size)
	if id == 0 {
		t.Fatal("prepare = 0")
	}
	other := bridgePut(t, mod, bridgeReq+0x1000, `{"tool":"lookup","args":{}}`)
	if n := r.hostCall(st.ctx, mod, bridgeReq+0x1000, other, bridgeOut, bridgeCap); bridgeGet(t, mod, bridgeOut, n) != `{"value":21}` {
		t.Fatal("first call failed")
	}
	n := r.hostResolve(st.ctx, mod, id, bridgeReq, size, bridgeOut, bridgeCap)
	if got := bridgeGet(t, mod, bridgeOut, n); got != `{"value":null,"error":"tool call budget exhausted"}` {
		t.Fatalf("claimed early read past the budget = %s", got)
	}
	if st.calls != 1 {
		t.Fatalf("st.calls = %d, want 1", st.calls)
	}
}

// --- prepare and resolve ---------------------------------------------------

// bridgeEarly is a manifest with an early-read tool "snap" (counted by snap),
// a plain tool "lookup" (counted by lookup), and the tools of bridgeTools.
func bridgeEarly(snap, lookup *counter) Manifest {
	m := bridgeTools(lookup)
	m["snap"] = ToolSpec{Call: snap.call, AllowEarlyRead: true}
	return m
}

func TestBridgePrepareReturnsZero(t *testing.T) {
	const page = engine.WasmPageSize
	for _, tc := range []struct {
		name      string
		early     bool
		request   string
		ptr, size uint32 // when ptr != 0, used as is
	}{
		{name: "early reads off", early: false, request: `{"tool":"snap","args":{}}`},
		{name: "tool without AllowEarlyRead", early: true, request: `{"tool":"lookup","args":{}}`},
		{name: "unknown tool", early: true, request: `{"tool":"nope","args":{}}`},
		{name: "empty tool", early: true, request: `{"args":{}}`},
		{name: "bad JSON", early: true, request: `{"tool":"snap"`},
		{name: "outside memory", early: true, ptr: page + 1, size: 4},
		{name: "past end", early: true, ptr: page - 2, size: 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mod := bridgeModule(t, 1)
			snap, lookup := &counter{value: 1}, &counter{value: 2}
			r := bridgeRunner(bridgeEarly(snap, lookup), nil)
			st := bridgeRun(t, r, tc.early)
			ptr, size := tc.ptr, tc.size
			if ptr == 0 {
				ptr = bridgeReq
				size = bridgePut(t, mod, ptr, tc.request)
			}
			if id := r.hostPrepare(st.ctx, mod, ptr, size); id != 0 {
				t.Fatalf("hostPrepare = %d, want 0", id)
			}
			st.close()
			if snap.calls() != 0 || lookup.calls() != 0 || st.calls != 0 || st.started != 0 {
				t.Fatalf("a refused prepare ran a tool or spent budget: snap %d lookup %d calls %d started %d",
					snap.calls(), lookup.calls(), st.calls, st.started)
			}
		})
	}
}

func TestBridgePrepareAfterCancel(t *testing.T) {
	mod := bridgeModule(t, 1)
	snap := &counter{value: 1}
	r := bridgeRunner(bridgeEarly(snap, &counter{}), nil)
	ctx, cancel := context.WithCancel(context.Background())
	st := newRunState(r, ctx, true)
	t.Cleanup(st.close)
	cancel()
	size := bridgePut(t, mod, bridgeReq, `{"tool":"snap","args":{}}`)
	if id := r.hostPrepare(st.ctx, mod, bridgeReq, size); id != 0 {
		t.Fatalf("prepare on a stopped run = %d, want 0", id)
	}
}

func TestBridgePrepareResolveMatch(t *testing.T) {
	mod := bridgeModule(t, 1)
	snap, lookup := &counter{value: map[string]int{"n": 7}}, &counter{value: 2}
	r := bridgeRunner(bridgeEarly(snap, lookup), nil)
	st := bridgeRun(t, r, true)

	size := bridgePut(t, mod, bridgeReq, `{"tool":"snap","args":{"key":"a"}}`)
	id := r.hostPrepare(st.ctx, mod, bridgeReq, size)
	if id == 0 {
		t.Fatal("hostPrepare = 0 for an early-read tool with early reads on")
	}
	n := r.hostResolve(st.ctx, mod, id, bridgeReq, size, bridgeOut, bridgeCap)
	if got := bridgeGet(t, mod, bridgeOut, n); got != `{"value":{"n":7}}` {
		t.Fatalf("resolve = %s", got)
	}
	if snap.calls() != 1 || lookup.calls() != 0 {
		t.Fatalf("snap called %d times, lookup %d; want 1, 0", snap.calls(), lookup.calls())
	}
	if snap.args[0] != `{"key":"a"}` {
		t.Fatalf("future got args %q", snap.args[0])
	}
	if st.calls != 1 || st.started != 1 {
		t.Fatalf("calls %d started %d, want 1 1", st.calls, st.started)
	}
	// The handle is consumed: resolving it again is a normal call.
	n = r.hostResolve(st.ctx, mod, id, bridgeReq, size, bridgeOut, bridgeCap)
	if got := bridgeGet(t, mod, bridgeOut, n); got != `{"value":{"n":7}}` {
		t.Fatalf("second resolve = %s", got)
	}
	if snap.calls() != 2 || st.calls != 2 {
		t.Fatalf("consumed handle: snap called %d times, calls %d; want 2, 2", snap.calls(), st.calls)
	}
}

func TestBridgeResolveNormalCall(t *testing.T) {
	for _, tc := range []struct {
		name string
		id   func(t *testing.T, r *Runner, st *runState, mod api.Module) uint32
	}{
		{"id 0", func(*testing.T, *Runner, *runState, api.Module) uint32 { return 0 }},
		{"unknown id", func(*testing.T, *Runner, *runState, api.Module) uint32 { return 99 }},
		{"max id", func(*testing.T, *Runner, *runState, api.Module) uint32 { return math.MaxUint32 }},
		{"early reads off", func(t *testing.T, r *Runner, st *runState, mod api.Module) uint32 {
			st.early = false
			size := bridgePut(t, mod, bridgeReq+0x1000, `{"tool":"snap","args":{}}`)
			return r.hostPrepare(st.ctx, mod, bridgeReq+0x1000, size) // 0
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mod := bridgeModule(t, 1)
			snap, lookup := &counter{value: "s"}, &counter{value: 2}
			r := bridgeRunner(bridgeEarly(snap, lookup), nil)
			st := bridgeRun(t, r, true)
			id := tc.id(t, r, st, mod)
			size := bridgePut(t, mod, bridgeReq, `{"tool":"snap","args":{}}`)
			n := r.hostResolve(st.ctx, mod, id, bridgeReq, size, bridgeOut, bridgeCap)
			if got := bridgeGet(t, mod, bridgeOut, n); got != `{"value":"s"}` {
				t.Fatalf("resolve = %s", got)
			}
			if snap.calls() != 1 || st.calls != 1 {
				t.Fatalf("snap called %d times, calls %d; want 1, 1", snap.calls(), st.calls)
			}
			// A plain tool and an unknown one resolve like call.
			size = bridgePut(t, mod, bridgeReq, `{"tool":"lookup","args":{}}`)
			n = r.hostResolve(st.ctx, mod, id, bridgeReq, size, bridgeOut, bridgeCap)
			if got := bridgeGet(t, mod, bridgeOut, n); got != `{"value":2}` {
				t.Fatalf("resolve lookup = %s", got)
			}
			size = bridgePut(t, mod, bridgeReq, `{"tool":"nope","args":{}}`)
			n = r.hostResolve(st.ctx, mod, id, bridgeReq, size, bridgeOut, bridgeCap)
			if got := bridgeGet(t, mod, bridgeOut, n); got != `{"value":null,"error":"unknown tool: nope"}` {
				t.Fatalf("resolve nope = %s", got)
			}
		})
	}
}

// blocker is an early-read tool: with args {"block":true} it waits for its
// ctx to end, reports that on cancelled, and returns ctx.Err(); otherwise it
// answers at once. exited is closed when a blocking call has returned.
type blocker struct {
	calls     atomic.Int32
	started   chan struct{}
	cancelled chan struct{}
	exited    chan struct{}
}

func newBlocker() *blocker {
	return &blocker{started: make(chan struct{}), cancelled: make(chan struct{}), exited: make(chan struct{})}
}

func (b *blocker) call(ctx context.Context, args json.RawMessage) (any, error) {
	b.calls.Add(1)
	if string(args) != `{"block":true}` {
		return "quick", nil
	}
	defer close(b.exited)
	close(b.started)
	<-ctx.Done()
	close(b.cancelled)
	time.Sleep(20 * time.Millisecond) // close must wait for this
	return nil, ctx.Err()
}

func TestBridgeResolveMismatchCancelsFuture(t *testing.T) {
	for _, tc := range []struct {
		name    string
		request string
		want    string
	}{
		{"other args", `{"tool":"block","args":{"block":false}}`, `{"value":"quick"}`},
		{"same args, other spacing", `{"tool":"block","args":{"block": true}}`, `{"value":"quick"}`}, // bytes differ
		{"other tool", `{"tool":"lookup","args":{"block":true}}`, `{"value":21}`},
		{"unknown tool", `{"tool":"nope","args":{"block":true}}`, `{"value":null,"error":"unknown tool: nope"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mod := bridgeModule(t, 1)
			b := newBlocker()
			lookup := &counter{value: 21}
			manifest := bridgeTools(lookup)
			manifest["block"] = ToolSpec{Call: b.call, AllowEarlyRead: true}
			r := bridgeRunner(manifest, nil)
			st := bridgeRun(t, r, true)

			size := bridgePut(t, mod, bridgeReq, `{"tool":"block","args":{"block":true}}`)
			id := r.hostPrepare(st.ctx, mod, bridgeReq, size)
			if id == 0 {
				t.Fatal("prepare = 0")
			}
			<-b.started // a hang is the failure: go test -timeout reports it
			size = bridgePut(t, mod, bridgeReq, tc.request)
			n := r.hostResolve(st.ctx, mod, id, bridgeReq, size, bridgeOut, bridgeCap)
			if got := bridgeGet(t, mod, bridgeOut, n); got != tc.want {
				t.Fatalf("resolve = %s, want %s", got, tc.want)
			}
			<-b.cancelled
			<-b.exited
			if st.calls != 1 {
				t.Fatalf("calls = %d, want 1", st.calls)
			}
			// The handle is gone: resolving it now is a normal call.
			size = bridgePut(t, mod, bridgeReq, `{"tool":"block","args":{}}`)
			before := b.calls.Load()
			n = r.hostResolve(st.ctx, mod, id, bridgeReq, size, bridgeOut, bridgeCap)
			if got := bridgeGet(t, mod, bridgeOut, n); got != `{"value":"quick"}` || b.calls.Load() != before+1 {
				t.Fatalf("resolve of a dropped handle = %s (calls %d -> %d)", got, before, b.calls.Load())
			}
		})
	}
}

func TestBridgeResolveDeliversFutureErrorOnce(t *testing.T) {
	mod := bridgeModule(t, 1)
	var n atomic.Int32
	flaky := func(context.Context, json.RawMessage) (any, error) {
		if n.Add(1) == 1 {
			return nil, errors.New("transient")
		}
		return "ok", nil
	}
	r := bridgeRunner(Manifest{"flaky": {Call: flaky, AllowEarlyRead: true}}, nil)
	st := bridgeRun(t, r, true)
	size := bridgePut(t, mod, bridgeReq, `{"tool":"flaky","args":{}}`)
	id := r.hostPrepare(st.ctx, mod, bridgeReq, size)
	if id == 0 {
		t.Fatal("prepare = 0")
	}
	got := r.hostResolve(st.ctx, mod, id, bridgeReq, size, bridgeOut, bridgeCap)
	if resp := bridgeGet(t, mod, bridgeOut, got); resp != `{"value":null,"error":"transient"}` {
		t.Fatalf("resolve = %s, want the future's error", resp)
	}
	if n.Load() != 1 {
		t.Fatalf("flaky called %d times, want 1 (no retry)", n.Load())
	}
}

func TestBridgeResolvePanickingFuture(t *testing.T) {
	mod := bridgeModule(t, 1)
	r := bridgeRunner(Manifest{"p": {Call: func(context.Context, json.RawMessage) (any, error) {
		panic("early boom")
	}, AllowEarlyRead: true}}, nil)
	st := bridgeRun(t, r, true)
	size := bridgePut(t, mod, bridgeReq, `{"tool":"p","args":{}}`)
	id := r.hostPrepare(st.ctx, mod, bridgeReq, size)
	if id == 0 {
		t.Fatal("prepare = 0")
	}
	n := r.hostResolve(st.ctx, mod, id, bridgeReq, size, bridgeOut, bridgeCap)
	if got := bridgeGet(t, mod, bridgeOut, n); got != `{"value":null,"error":"tool panicked: early boom"}` {
		t.Fatalf("resolve = %s", got)
	}
}

func TestBridgeResolveBadRequest(t *testing.T) {
	// A request hostResolve cannot read is answered with an error envelope
	// and leaves the handle in place.
	mod := bridgeModule(t, 1)
	snap := &counter{value: 5}
	r := bridgeRunner(bridgeEarly(snap, &counter{}), nil)
	st := bridgeRun(t, r, true)
	size := bridgePut(t, mod, bridgeReq, `{"tool":"snap","args":{}}`)
	id := r.hostPrepare(st.ctx, mod, bridgeReq, size)
	if id == 0 {
		t.Fatal("prepare = 0")
	}
	n := r.hostResolve(st.ctx, mod, id, engine.WasmPageSize, 10, bridgeOut, bridgeCap)
	if got := bridgeGet(t, mod, bridgeOut, n); got != `{"value":null,"error":"tool request outside ABI bounds"}` {
		t.Fatalf("resolve outside memory = %s", got)
	}
	bad := bridgePut(t, mod, bridgeReq+0x1000, `{"tool":`)
	n = r.hostResolve(st.ctx, mod, id, bridgeReq+0x1000, bad, bridgeOut, bridgeCap)
	if got := bridgeGet(t, mod, bridgeOut, n); got != `{"value":null,"error":"unexpected end of JSON input"}` {
		t.Fatalf("resolve bad JSON = %s", got)
	}
	n = r.hostResolve(st.ctx, mod, id, bridgeReq, size, bridgeOut, bridgeCap)
	if got := bridgeGet(t, mod, bridgeOut, n); got != `{"value":5}` || snap.calls() != 1 {
		t.Fatalf("resolve = %s with %d calls, want the future", got, snap.calls())
	}
	// A response over capacity is abi.Failed; memory is untouched.
	id = r.hostPrepare(st.ctx, mod, bridgeReq, size)
	before := bridgeMemory(t, mod)
	if n := r.hostResolve(st.ctx, mod, id, bridgeReq, size, bridgeOut, 3); n != abi.Failed {
		t.Fatalf("resolve over capacity = %#x", n)
	}
	if !bytes.Equal(before, bridgeMemory(t, mod)) {
		t.Fatal("memory changed")
	}
}

func TestBridgePreparePendingCap(t *testing.T) {
	mod := bridgeModule(t, 1)
	snap := &counter{value: 1}
	r := bridgeRunner(bridgeEarly(snap, &counter{}), &Options{MaxPendingEarlyReads: 2})
	st := bridgeRun(t, r, true)
	size := bridgePut(t, mod, bridgeReq, `{"tool":"snap","args":{}}`)
	a := r.hostPrepare(st.ctx, mod, bridgeReq, size)
	b := r.hostPrepare(st.ctx, mod, bridgeReq, size)
	if a == 0 || b == 0 || a == b {
		t.Fatalf("prepare = %d, %d; want two distinct handles", a, b)
	}
	if c := r.hostPrepare(st.ctx, mod, bridgeReq, size); c != 0 {
		t.Fatalf("third prepare = %d, want 0 (pending cap 2)", c)
	}
	// Claiming one frees a slot.
	n := r.hostResolve(st.ctx, mod, a, bridgeReq, size, bridgeOut, bridgeCap)
	if got := bridgeGet(t, mod, bridgeOut, n); got != `{"value":1}` {
		t.Fatalf("resolve = %s", got)
	}
	if c := r.hostPrepare(st.ctx, mod, bridgeReq, size); c == 0 || c == a || c == b {
		t.Fatalf("prepare after a claim = %d, want a fresh handle", c)
	}
	st.close() // waits for the unclaimed futures
	if snap.calls() != 3 {
		t.Fatalf("snap called %d times, want 3", snap.calls())
	}
}

func TestBridgePrepareStartedCap(t *testing.T) {
	mod := bridgeModule(t, 1)
	snap := &counter{value: 1}
	r := bridgeRunner(bridgeEarly(snap, &counter{}), &Options{MaxEarlyReads: 2})
	st := bridgeRun(t, r, true)
	size := bridgePut(t, mod, bridgeReq, `{"tool":"snap","args":{}}`)
	for i := range 2 {
		id := r.hostPrepare(st.ctx, mod, bridgeReq, size)
		if id == 0 {
			t.Fatalf("prepare %d = 0", i+1)
		}
		r.hostResolve(st.ctx, mod, id, bridgeReq, size, bridgeOut, bridgeCap)
	}
	if id := r.hostPrepare(st.ctx, mod, bridgeReq, size); id != 0 {
		t.Fatalf("third prepare = %d, want 0 (MaxEarlyReads 2)", id)
	}
}

func TestBridgeCloseCancelsUnclaimedFuture(t *testing.T) {
	mod := bridgeModule(t, 1)
	b := newBlocker()
	r := bridgeRunner(Manifest{"block": {Call: b.call, AllowEarlyRead: true}}, nil)
	st := newRunState(r, context.Background(), true)
	size := bridgePut(t, mod, bridgeReq, `{"tool":"block","args":{"block":true}}`)
	if id := r.hostPrepare(st.ctx, mod, bridgeReq, size); id == 0 {
		t.Fatal("prepare = 0")
	}
	<-b.started // a hang is the failure: go test -timeout reports it
	select {
	case <-b.cancelled:
		t.Fatal("future cancelled before close")
	default:
	}
	closed := make(chan struct{})
	go func() {
		st.close()
		close(closed)
	}()
	<-closed
	// close returned only after the future's tool did: nothing is left running.
	select {
	case <-b.cancelled:
	default:
		t.Fatal("close returned but the future never saw cancellation")
	}
	select {
	case <-b.exited:
	default:
		t.Fatal("close returned while the future's tool was still running")
	}
	if len(st.futures) != 0 {
		t.Fatalf("%d futures left after close", len(st.futures))
	}
	st.close() // twice is fine
}

// nilPtrError is an error type whose Error dereferences its receiver: a
// tool returning a typed nil *nilPtrError (the classic Go mistake) gives a
// non-nil error whose Error() panics.
type nilPtrError struct{ msg string }

func (e *nilPtrError) Error() string { return e.msg }

// bridgeEncodePanics are tool results that panic while encodeResponse encodes
// them, after callTool's recover has returned.
var bridgeEncodePanics = map[string]Tool{
	"MarshalJSON panics": func(context.Context, json.RawMessage) (any, error) {
		return panicMarshaler{}, nil
	},
	"typed nil error": func(context.Context, json.RawMessage) (any, error) {
		var err *nilPtrError
		return nil, err
	},
}

// TestBridgeInvokeEncodePanic: a tool result that panics while being encoded
// must not escape invoke as a panic (callTool promises no tool can crash the
// Host); the Guest should get an error envelope.
func TestBridgeInvokeEncodePanic(t *testing.T) {
	for name, tool := range bridgeEncodePanics {
		t.Run(name, func(t *testing.T) {
			r := bridgeRunner(Manifest{"m": {Call: tool}}, nil)
			var got []byte
			func() {
				defer func() {
					if p := recover(); p != nil {
						t.Errorf("invoke panicked while encoding the tool's result: %v", p)
					}
				}()
				got = r.invoke(bridgeRun(t, r, false).ctx, callRequest{Tool: "m", Args: json.RawMessage(`{}`)})
			}()
			if got != nil {
				var envelope map[string]any
				if err := json.Unmarshal(got, &envelope); err != nil || envelope["error"] == nil {
					t.Fatalf("response %s is not an error envelope", got)
				}
			}
		})
	}
}

// TestBridgePrepareEncodePanic: the same results from an early-read tool are
// encoded on the future's own goroutine, where nothing recovers. The run is
// made in a child process so that a crash fails this test, not the test binary.
func TestBridgePrepareEncodePanic(t *testing.T) {
	if name := os.Getenv("SPINE_BRIDGE_CHILD"); name != "" {
		mod := bridgeModule(t, 1)
		r := bridgeRunner(Manifest{"m": {Call: bridgeEncodePanics[name], AllowEarlyRead: true}}, nil)
		st := bridgeRun(t, r, true)
		size := bridgePut(t, mod, bridgeReq, `{"tool":"m","args":{}}`)
		id := r.hostPrepare(st.ctx, mod, bridgeReq, size)
		n := r.hostResolve(st.ctx, mod, id, bridgeReq, size, bridgeOut, bridgeCap)
		t.Logf("resolve returned %d: %q", n, bridgeGet(t, mod, bridgeOut, min(n, bridgeCap)))
		// The future's deferred wg.Done and close(done) run while it panics,
		// so resolve and close can return before the runtime kills the
		// process: give it the time to.
		time.Sleep(time.Second)
		return
	}
	if testing.Short() {
		t.Skip("starts a child process")
	}
	for name := range bridgeEncodePanics {
		t.Run(name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestBridgePrepareEncodePanic$", "-test.count=1", "-test.v")
			cmd.Env = append(os.Environ(), "SPINE_BRIDGE_CHILD="+name)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("the Host process crashed on an early-read tool result that panics while encoded (%v):\n%s",
					err, firstLines(string(out), 12))
			}
		})
	}
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, "\n")
}
