//go:build linux

package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/spine-run/spine/guest"
	"github.com/spine-run/spine/internal/abi"
)

// TestResetFootprint measures what a reset after one run of the empty program
// restores: the image's pages the run made private (the bytes reset copies back) and,
// of those, the bytes that really differ from the image. docs/performance.md
// ("Closer to the floor") quotes its log:
//
//	go test -run TestResetFootprint -v ./internal/engine
func TestResetFootprint(t *testing.T) {
	if testing.Short() {
		t.Skip("starts CPython and prepares an image")
	}
	ctx := context.Background()
	e, err := New(ctx, Config{
		Wasm: guest.Wasm, StdlibZip: guest.StdlibZip, ImageKey: "footprint-test",
		MemoryLimit: 256 << 20, MaxOutput: 1 << 20, MaxDescriptors: 64,
		Start: StartCOW, NoDiskCache: true,
		Bridge: abi.Host{}, // the program calls no tool
		Warm: func(ctx context.Context, g *Instance) error {
			_, err := g.Execute(g.Begin(ctx, nil), footprintRequest(footprintWarm), 1<<20)
			g.End()
			return err
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	inst, err := e.NewInstance(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close()
	empty := footprintRequest("")
	for run := 1; run <= 3; run++ {
		out, err := inst.Execute(inst.Begin(ctx, nil), empty, 1<<20)
		inst.End()
		if err != nil || string(out) != `{"value":null}` {
			t.Fatalf("run %d: %s, %v", run, out, err)
		}
		pages, ok := inst.cow.touched(inst.cow.imageSize)
		if !ok {
			t.Skip("no pagemap here")
		}
		mem, image := inst.cow.buf, inst.cow.image.view
		differ, differPages := 0, 0
		for _, p := range pages {
			a, b := mem[int(p)*pageSize:int(p+1)*pageSize], image[int(p)*pageSize:int(p+1)*pageSize]
			if bytes.Equal(a, b) {
				continue
			}
			differPages++
			for i := range a {
				if a[i] != b[i] {
					differ++
				}
			}
		}
		t.Logf("run %d: reset copies %d pages (%d KiB); %d of them differ from the image, in %d bytes",
			run, len(pages), len(pages)*pageSize>>10, differPages, differ)
		if err := inst.Reset(); err != nil {
			t.Fatal(err)
		}
	}
}

// footprintWarm is what a Runner's warm-up imports and runs before its image is taken
// (internal/bench's bare host does the same).
const footprintWarm = `import json, re, math, datetime, collections, itertools, functools, ast
import asyncio, concurrent.futures.thread
asyncio.run(asyncio.sleep(0))
import plm
plm.warm()
import gc
gc.collect()
gc.freeze()
`

func footprintRequest(source string) []byte {
	b, _ := json.Marshal(map[string]any{"source": source, "inputs": map[string]any{}, "tools": []any{},
		"early_reads": false, "result_limit": 1 << 20})
	return b
}
