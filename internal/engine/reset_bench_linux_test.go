//go:build linux

package engine

import (
	"bytes"
	"context"
	"runtime"
	"slices"
	"testing"
	"time"
	"unsafe"

	"github.com/spine-run/spine/guest"
	"github.com/spine-run/spine/internal/abi"
)

// These benchmarks measure where an empty run's time goes around the reset
// (docs/performance.md, "Where an empty run's time goes"):
//
//	go test -run '^$' -bench 'EmptyAfterReset|ResetParts' -benchtime 40x ./internal/engine

// benchImageEngine is an engine whose Guests start copy-on-write from an
// image warmed as a Runner's is, without tools.
func benchImageEngine(b *testing.B) *Engine {
	ctx := context.Background()
	e, err := New(ctx, Config{
		Wasm: guest.Wasm, StdlibZip: guest.StdlibZip, ImageKey: "reset-bench",
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
		b.Fatal(err)
	}
	b.Cleanup(func() { e.Close(ctx) })
	return e
}

// BenchmarkEmptyAfterReset times an empty program's execute on a Guest
// that, just before, was not reset (none), was reset on the same thread
// (here), was reset by another goroutine (goroutine: where the pool used to
// reset), was not reset but the thread slept 2 ms (idle), was reset and then
// slept (reset-idle: a pool that resets as a run ends, then waits for the
// next) or slept and then was reset (idle-reset: one that resets as the next
// run begins), or is one of two Guests taking turns, each reset on this
// thread (two-guests: a FIFO pool of two). Each of b.N rounds runs 5 of each
// kind; the metrics are the p50s, and the page faults the process took
// during a run, on average (faults/run).
func BenchmarkEmptyAfterReset(b *testing.B) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	ctx := context.Background()
	e := benchImageEngine(b)
	inst, err := e.NewInstance(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { inst.Close() }()
	other, err := e.NewInstance(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { other.Close() }()
	empty := footprintRequest("")
	var faults, runs int64 // the process's page faults during the runs, and the runs
	run := func(g *Instance) time.Duration {
		before := processFaults()
		start := time.Now()
		out, err := g.Execute(g.Begin(ctx, nil), empty, 1<<20)
		d := time.Since(start)
		faults += processFaults() - before
		runs++
		g.End()
		if err != nil || string(out) != `{"value":null}` {
			b.Fatalf("%s, %v", out, err)
		}
		return d
	}
	kinds := []string{"none", "here", "goroutine", "idle", "two-guests", "reset-idle", "idle-reset"}
	before := map[string]func(){
		"none": func() {},
		"here": func() { inst.Reset() },
		"goroutine": func() {
			done := make(chan struct{})
			go func() { inst.Reset(); close(done) }()
			<-done
		},
		"idle":       func() { time.Sleep(2 * time.Millisecond) },
		"reset-idle": func() { inst.Reset(); time.Sleep(2 * time.Millisecond) },
		"idle-reset": func() { time.Sleep(2 * time.Millisecond); inst.Reset() },
		"two-guests": func() { inst.Reset(); inst, other = other, inst },
	}
	for i := 0; i < 10; i++ {
		run(inst)
		inst.Reset()
	}
	times := map[string][]time.Duration{}
	faults, runs = 0, 0
	b.ResetTimer()
	for round := 0; round < b.N; round++ {
		for _, kind := range kinds {
			for i := 0; i < 5; i++ {
				before[kind]()
				times[kind] = append(times[kind], run(inst))
			}
			inst.Reset()
			run(inst)
		}
	}
	for _, kind := range kinds {
		b.ReportMetric(p50µs(times[kind]), kind+"-µs")
	}
	b.ReportMetric(float64(faults)/float64(runs), "faults/run")
}

// BenchmarkResetParts times a reset after an empty run: with PAGEMAP_SCAN
// (with-scan-µs); the copy alone, as when the process took no page fault
// since the last scan (copy-only-µs); comparing each private page with the
// image and copying only those that differ instead (compare-µs); and the
// pages the reset copies.
func BenchmarkResetParts(b *testing.B) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	ctx := context.Background()
	e := benchImageEngine(b)
	inst, err := e.NewInstance(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer inst.Close()
	empty := footprintRequest("")
	run := func() {
		if _, err := inst.Execute(inst.Begin(ctx, nil), empty, 1<<20); err != nil {
			b.Fatal(err)
		}
		inst.End()
	}
	var scanned, copied, compared []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N*5; i++ {
		run()
		inst.cow.scanned = false
		start := time.Now()
		inst.Reset()
		scanned = append(scanned, time.Since(start))
		run()
		start = time.Now()
		inst.cow.restore()
		copied = append(copied, time.Since(start))
		run()
		start = time.Now()
		c := inst.cow
		base := int(uintptr(unsafe.Pointer(&c.buf[0])))
		for _, r := range c.private {
			from, to := int(r.start)-base, int(r.end)-base
			for p := from; p < to; p += pageSize {
				if !bytes.Equal(c.buf[p:p+pageSize], c.image.view[p:p+pageSize]) {
					copy(c.buf[p:p+pageSize], c.image.view[p:p+pageSize])
				}
			}
		}
		compared = append(compared, time.Since(start))
	}
	pages := 0
	for _, r := range inst.cow.private {
		pages += int((r.end - r.start) / pageSize)
	}
	b.ReportMetric(p50µs(scanned), "with-scan-µs")
	b.ReportMetric(p50µs(copied), "copy-only-µs")
	b.ReportMetric(p50µs(compared), "compare-µs")
	b.ReportMetric(float64(pages), "pages")
}

func p50µs(times []time.Duration) float64 {
	slices.Sort(times)
	return float64(times[len(times)/2]) / 1e3
}
