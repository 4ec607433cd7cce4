package spine_test

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/internal/spinetest"
)

// Per-run overhead: what a pooled run costs beyond its program. Run with
//
//	go test -run '^$' -bench 'RunEmpty|PerRunAgainst' -benchtime 2000x .
//	SPINE_BASELINE_ARTIFACT=<folder with spine.wasm and python311.zip> \
//	    go test -run '^$' -bench PerRunAgainst -benchtime 2000x .
//
// docs/performance.md ("Closer to the floor") records the figures.

var perRunDemo = spine.Request{
	Source: "price = lookup(key=\"book\")\nresult = price * inputs[\"quantity\"]\n",
	Inputs: map[string]any{"quantity": 3},
}

// perRunLong is a program of the length agents write (about 1.2 KB, 46 lines): helper
// functions, a loop, a comprehension, two tool calls.
var perRunLong = spine.Request{Source: `class Item:
    """One line of an order."""

    def __init__(self, key, quantity):
        self.key = key
        self.quantity = quantity


def total(items, prices):
    """The price of every item times its quantity, summed."""
    out = 0
    for item in items:
        price = prices.get(item.key)
        if price is None:
            raise ValueError(f"no price for {item.key}")
        out += price * item.quantity
    return out


def parse(order):
    items = []
    for line in order.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, _, quantity = line.partition(":")
        items.append(Item(key.strip(), int(quantity or 1)))
    return items


order = """
# an order
book: 1
pen: 5
book: 0
"""
items = parse(order)
keys = sorted({item.key for item in items})
prices = {key: lookup(key=key) for key in keys}
summary = {
    "lines": len(items),
    "keys": keys,
    "total": total(items, prices),
}
assert summary["lines"] == 3, summary
summary["total"] + inputs["extra"]
`, Inputs: map[string]any{"extra": 11}}

// BenchmarkRunEmpty is one pooled run of the empty program: all of a run's cost that
// is not the program's own.
func BenchmarkRunEmpty(b *testing.B) {
	r := benchShared(b)
	ctx := context.Background()
	samples := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		out, err := r.Run(ctx, spine.Request{})
		if err != nil || string(out.Value) != "null" {
			b.Fatal(out, err)
		}
		samples = append(samples, time.Since(start))
	}
	reportMedian(b, samples, "ns")
}

// BenchmarkPerRunAgainst runs the demo and the empty program in pooled runs with the
// embedded Guest and with the Guest artifact in the folder SPINE_BASELINE_ARTIFACT
// names (spine.wasm, python311.zip), alternating in blocks of 20 so that both meet the
// same load, and reports each one's median and the ratio embedded / baseline.
func BenchmarkPerRunAgainst(b *testing.B) {
	dir := os.Getenv("SPINE_BASELINE_ARTIFACT")
	if dir == "" {
		b.Skip("SPINE_BASELINE_ARTIFACT names no baseline Guest artifact")
	}
	wasm, err := os.ReadFile(filepath.Join(dir, "spine.wasm"))
	if err != nil {
		b.Fatal(err)
	}
	zip, err := os.ReadFile(filepath.Join(dir, "python311.zip"))
	if err != nil {
		b.Fatal(err)
	}
	perRunCompare(b, [2]*spine.Runner{
		benchShared(b),
		spinetest.NewRunner(b, benchManifest(), &spine.Options{Artifact: &spine.Artifact{Wasm: wasm, StdlibZip: zip}}),
	})
}

// perRunCompare runs the demo and the empty program on runners[0] and runners[1] in
// alternating blocks of 20 and reports the medians and the ratio 0 / 1.
func perRunCompare(b *testing.B, runners [2]*spine.Runner) {
	ctx := context.Background()
	for _, c := range []struct {
		name string
		req  spine.Request
		want string
	}{
		{"demo", perRunDemo, "63"},
		{"empty", spine.Request{}, "null"},
		{"long", perRunLong, "42"},
	} {
		b.Run(c.name, func(b *testing.B) {
			var samples [2][]time.Duration
			const block = 20
			for done := 0; done < b.N; done += block {
				for k, r := range runners {
					for i := 0; i < block; i++ {
						start := time.Now()
						out, err := r.Run(ctx, c.req)
						if err != nil || string(out.Value) != c.want {
							b.Fatal(out, err)
						}
						samples[k] = append(samples[k], time.Since(start))
					}
				}
			}
			medians := [2]float64{median(samples[0]), median(samples[1])}
			b.ReportMetric(medians[0], "p50-ns")
			b.ReportMetric(medians[1], "baseline-p50-ns")
			b.ReportMetric(medians[0]/medians[1], "ratio")
		})
	}
}

func median(samples []time.Duration) float64 {
	if len(samples) == 0 {
		return 0
	}
	sort.Slice(samples, func(i, j int) bool { return samples[i] < samples[j] })
	return float64(samples[len(samples)/2])
}
