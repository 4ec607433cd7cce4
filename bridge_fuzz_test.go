package spine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"testing"

	"github.com/spine-run/spine/internal/abi"
	"github.com/spine-run/spine/internal/engine"
)

// The fuzz targets reuse one module per process; each iteration clears what
// the previous one wrote, so a failing input reproduces on its own.

// FuzzReadRequest: any bytes anywhere in memory, read at any ptr/size, never
// panic; a request is read exactly when it is in bounds and valid JSON, and a
// request read re-marshals.
func FuzzReadRequest(f *testing.F) {
	for _, seed := range []struct {
		data      string
		at        uint32
		ptr, size uint32
	}{
		{`{"tool":"lookup","args":{"key":"book"}}`, 0x100, 0x100, 39},
		{`{"tool":"lookup","args":{"key":"book"}}`, 0x100, 0x100, 20},
		{`{"tool":"x"}`, 0, 0, 12},
		{`{"tool":"x","args":null}`, 0, 0, 24},
		{`{"tool":"\ud800","args":[1,{"a":"\u00e9"}]}`, 7, 7, 41},
		{`{"tool":"\xff\xfe","args":"\xff"}`, 7, 7, 22},
		{`null`, 0, 0, 4},
		{`[]`, 0, 0, 2},
		{``, 0, 0, 0},
		{`{}`, 0, 20 * engine.WasmPageSize, 1},
		{`{}`, 0, 20*engine.WasmPageSize - 2, 2},
		{`{}`, 0, 0xFFFFFFFF, 2},
		{`{}`, 0, 0, maxMessage + 1},
		{`{}`, 0, 0, 0xFFFFFFFF},
	} {
		f.Add([]byte(seed.data), seed.at, seed.ptr, seed.size)
	}
	mod := bridgeModule(f, 20) // 1.25 MiB: sizes over maxMessage can be in bounds
	memSize := uint64(mod.Memory().Size())
	mem := bridgeMemoryView(f, mod)
	var lastAt, lastLen uint64
	f.Fuzz(func(t *testing.T, data []byte, at, ptr, size uint32) {
		clear(mem[lastAt : lastAt+lastLen])
		if uint64(len(data)) > memSize {
			data = data[:memSize]
		}
		start := uint64(at) % (memSize - uint64(len(data)) + 1)
		copy(mem[start:], data)
		lastAt, lastLen = start, uint64(len(data))

		req, err := readRequest(mod, ptr, size)

		inBounds := uint64(ptr)+uint64(size) <= memSize && size <= maxMessage
		if !inBounds {
			if err == nil || err.Error() != "tool request outside ABI bounds" {
				t.Fatalf("ptr %#x size %#x: err = %v, want out of bounds", ptr, size, err)
			}
			return
		}
		// Oracle: decode a private copy of the same bytes.
		var want callRequest
		wantErr := json.Unmarshal(bytes.Clone(mem[ptr:uint64(ptr)+uint64(size)]), &want)
		if (err == nil) != (wantErr == nil) {
			t.Fatalf("err = %v, oracle err = %v", err, wantErr)
		}
		if err != nil {
			if err.Error() == "tool request outside ABI bounds" {
				t.Fatalf("in-bounds request reported out of bounds")
			}
			return
		}
		if req.Tool != want.Tool || !bytes.Equal(req.Args, want.Args) || (req.Args == nil) != (want.Args == nil) {
			t.Fatalf("request %q %q, oracle %q %q", req.Tool, req.Args, want.Tool, want.Args)
		}
		if len(req.Args) > 0 && !json.Valid(req.Args) {
			t.Fatalf("Args %q is not valid JSON", req.Args)
		}
		encoded, err := json.Marshal(req)
		if err != nil {
			t.Fatalf("re-marshal %q %q: %v", req.Tool, req.Args, err)
		}
		var again callRequest
		if err := json.Unmarshal(encoded, &again); err != nil || again.Tool != req.Tool {
			t.Fatalf("round trip of %s: %q, %v", encoded, again.Tool, err)
		}
		// Neither Tool nor Args aliases Guest memory.
		if len(req.Args) > 0 {
			region := mem[ptr : uint64(ptr)+uint64(size)]
			saved := bytes.Clone(region)
			for i := range region {
				region[i] ^= 0xFF
			}
			if !bytes.Equal(req.Args, want.Args) || req.Tool != want.Tool {
				t.Fatal("request aliases Guest memory")
			}
			copy(region, saved)
		}
	})
}

// FuzzWriteResponse: any out/capacity/response never panic; the result is
// len(response) with exactly those bytes at out, or abi.Failed with memory
// untouched, and it is abi.Failed exactly when the buffer is outside
// memory or too small.
func FuzzWriteResponse(f *testing.F) {
	const page = engine.WasmPageSize
	for _, seed := range []struct {
		out, capacity uint32
		response      string
	}{
		{0x8000, 0x4000, `{"value":21}`},
		{0, 12, `{"value":21}`},
		{0, 11, `{"value":21}`},
		{page - 12, 12, `{"value":21}`},
		{page - 12, 13, `{"value":21}`},
		{page, 0, ``},
		{page, 1, `x`},
		{page + 1, 0, ``},
		{0xFFFFFFFF, 1, `x`},
		{1, 0xFFFFFFFF, `x`},
		{0, 0, ``},
		{0, page, `{"error":"tool result is not JSON: json: unsupported value: +Inf"}`},
	} {
		f.Add(seed.out, seed.capacity, []byte(seed.response))
	}
	mod := bridgeModule(f, 1)
	memSize := uint64(mod.Memory().Size())
	mem := bridgeMemoryView(f, mod)
	zero := make([]byte, len(mem))
	f.Fuzz(func(t *testing.T, out, capacity uint32, response []byte) {
		clear(mem)
		got := writeResponse(mod, out, capacity, response)
		fits := uint64(out)+uint64(capacity) <= memSize && uint64(len(response)) <= uint64(capacity)
		if !fits {
			if got != abi.Failed {
				t.Fatalf("out %#x capacity %#x len %d: got %#x, want abi.Failed", out, capacity, len(response), got)
			}
			if !bytes.Equal(mem, zero) {
				t.Fatal("memory written on failure")
			}
			return
		}
		if got != uint32(len(response)) {
			t.Fatalf("out %#x capacity %#x len %d: got %#x", out, capacity, len(response), got)
		}
		if !bytes.Equal(mem[out:uint64(out)+uint64(got)], response) {
			t.Fatal("memory at out is not the response")
		}
		// Nothing else was written.
		rest := bytes.Clone(mem)
		clear(rest[out : uint64(out)+uint64(got)])
		if !bytes.Equal(rest, zero) {
			t.Fatal("memory written outside the response")
		}
	})
}

// FuzzHostCall: any request bytes through hostCall give a written response
// that is a JSON object with a "value" or an "error" key (an error being a
// string), or abi.Failed only when that response is over capacity.
func FuzzHostCall(f *testing.F) {
	for _, seed := range []string{
		`{"tool":"lookup","args":{"key":"book"}}`,
		`{"tool":"echo","args":{"a":[1,2,{"b":null}]}}`,
		`{"tool":"echo","args":"\u003c\ud800"}`,
		`{"tool":"fail","args":{}}`,
		`{"tool":"nil","args":{}}`,
		`{"tool":"inf","args":{}}`,
		`{"tool":"chan","args":{}}`,
		`{"tool":"panic","args":{}}`,
		`{"tool":"raw","args":"{"}`,
		`{"tool":"raw","args":"[1, 2]"}`,
		`{"tool":"big","args":{}}`,
		`{"tool":"nope","args":{}}`,
		`{"tool":"","args":{}}`,
		`{"tool":"lookup"`,
		`{"tool":"\xff","args":{}}`,
		`null`,
		``,
		"\x00",
	} {
		f.Add([]byte(seed), uint16(bridgeCap))
	}
	f.Add([]byte(`{"tool":"lookup","args":{}}`), uint16(11))
	f.Add([]byte(`{"tool":"lookup","args":{}}`), uint16(0))

	manifest := Manifest{
		"lookup": {Call: func(context.Context, json.RawMessage) (any, error) { return 21, nil }},
		"echo":   {Call: func(_ context.Context, args json.RawMessage) (any, error) { return args, nil }},
		"fail": {Call: func(_ context.Context, args json.RawMessage) (any, error) {
			return nil, errors.New("failed on " + string(args))
		}},
		"nil":   {Call: func(context.Context, json.RawMessage) (any, error) { return nil, nil }},
		"inf":   {Call: func(context.Context, json.RawMessage) (any, error) { return math.Inf(1), nil }},
		"chan":  {Call: func(context.Context, json.RawMessage) (any, error) { return make(chan int), nil }},
		"panic": {Call: func(_ context.Context, args json.RawMessage) (any, error) { panic(string(args)) }},
		// raw returns its string argument as a json.RawMessage, valid or not.
		"raw": {Call: func(_ context.Context, args json.RawMessage) (any, error) {
			var s string
			if err := json.Unmarshal(args, &s); err != nil {
				return nil, err
			}
			return json.RawMessage(s), nil
		}},
		"big": {Call: func(context.Context, json.RawMessage) (any, error) {
			return string(make([]byte, bridgeCap)), nil
		}},
	}
	r := bridgeRunner(manifest, nil)
	mod := bridgeModule(f, 1)
	mem := bridgeMemoryView(f, mod)
	f.Fuzz(func(t *testing.T, request []byte, capacity uint16) {
		clear(mem)
		if len(request) > bridgeOut {
			request = request[:bridgeOut]
		}
		copy(mem, request)
		maxCap := uint32(len(mem)) - bridgeOut
		outCap := min(uint32(capacity), maxCap)
		st := newRunState(r, context.Background(), false)
		defer st.close()
		n := r.hostCall(st.ctx, mod, 0, uint32(len(request)), bridgeOut, outCap)
		if n == abi.Failed {
			// Only legitimate when the response would not fit.
			if want := r.hostCall(st.ctx, mod, 0, uint32(len(request)), bridgeOut, maxCap); want != abi.Failed && want <= outCap {
				t.Fatalf("abi.Failed with capacity %d for a %d-byte response", outCap, want)
			}
			return
		}
		if n > outCap {
			t.Fatalf("wrote %d bytes into a %d-byte buffer", n, outCap)
		}
		written := mem[bridgeOut : bridgeOut+n]
		var envelope map[string]json.RawMessage
		if err := json.Unmarshal(written, &envelope); err != nil {
			t.Fatalf("response %q is not a JSON object: %v", written, err)
		}
		_, hasValue := envelope["value"]
		errText, hasError := envelope["error"]
		if !hasValue && !hasError {
			t.Fatalf("response %s has neither value nor error", written)
		}
		if hasError {
			var s string
			if err := json.Unmarshal(errText, &s); err != nil {
				t.Fatalf("error in %s is not a string", written)
			}
			if hasValue && string(envelope["value"]) != "null" {
				t.Fatalf("error response %s carries a value", written)
			}
		}
		for key := range envelope {
			if key != "value" && key != "error" {
				t.Fatalf("response %s has key %q", written, key)
			}
		}
	})
}
