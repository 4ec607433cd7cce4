package engine

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/spine-run/spine/guest"
	"github.com/spine-run/spine/internal/abi"
	"github.com/spine-run/spine/internal/scratch"
)

// These helpers run the embedded Guest on an Engine as the Runner does, but
// without tools: the bridge is abi.Host's zero value.

// testWarm is the warm-up of the tests' images: the modules the programs
// import, everything alive frozen.
const testWarm = `import json, re, math, random, os, sys, builtins
import gc
gc.collect()
gc.freeze()
`

// testRequest is an execute request for source with inputs.
func testRequest(source string, inputs any) []byte {
	if inputs == nil {
		inputs = map[string]any{}
	}
	b, _ := json.Marshal(map[string]any{"source": source, "inputs": inputs, "tools": []any{},
		"early_reads": false, "result_limit": 1 << 20})
	return b
}

// testEngine makes an Engine of the embedded Guest from cfg, the artifact,
// limits, image key and warm-up filled in where cfg leaves them; it is
// closed at cleanup.
func testEngine(t testing.TB, cfg Config) *Engine {
	t.Helper()
	cfg.Wasm, cfg.StdlibZip = guest.Wasm, guest.StdlibZip
	if cfg.ImageKey == "" {
		cfg.ImageKey = "engine-test"
	}
	if cfg.MemoryLimit == 0 {
		cfg.MemoryLimit = 256 << 20
	}
	if cfg.MaxOutput == 0 {
		cfg.MaxOutput = 1 << 20
	}
	if cfg.MaxDescriptors == 0 {
		cfg.MaxDescriptors = 64
	}
	if cfg.Scratch == (scratch.Limits{}) {
		cfg.Scratch = scratch.Limits{MaxBytes: 16 << 20, MaxEntries: 1000}
	}
	cfg.Bridge = abi.Host{}
	if cfg.Warm == nil {
		cfg.Warm = func(ctx context.Context, g *Instance) error {
			_, err := g.Execute(g.Begin(ctx, nil), testRequest(testWarm, nil), 1<<20)
			g.End()
			return err
		}
	}
	e, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(context.Background()) })
	return e
}

// testExecute runs source on a Guest from e and gives it back as the Runner
// does (reused when the call into it ended cleanly): the execute response,
// or the error of the call into the Guest.
func testExecute(ctx context.Context, e *Engine, source string, inputs any) (string, error) {
	inst, err := e.Acquire(ctx)
	if err != nil {
		return "", err
	}
	response, err := inst.Execute(inst.Begin(ctx, nil), testRequest(source, inputs), 1<<20)
	inst.End()
	e.Release(inst, err == nil && ctx.Err() == nil)
	return string(response), err
}

// testRun runs source as testExecute does and fails t unless the Guest
// answered want, but for the value's display (the pool's tests care for
// the value; the display is the Runner's tests').
func testRun(t testing.TB, e *Engine, source string, inputs any, want string) {
	t.Helper()
	got, err := testExecute(context.Background(), e, source, inputs)
	if err != nil || withoutDisplay(got) != want {
		t.Fatalf("%q answered %s, %v; want %s", source, got, err, want)
	}
}

// withoutDisplay is an execute response without its display fields.
func withoutDisplay(response string) string {
	var fields map[string]json.RawMessage
	if json.Unmarshal([]byte(response), &fields) != nil {
		return response
	}
	delete(fields, "display")
	delete(fields, "displayed")
	out, _ := json.Marshal(fields)
	return string(out)
}
