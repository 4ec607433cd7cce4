package data

import (
	"context"
	"os"
	"sort"
	"testing"
	"time"

	"github.com/spine-run/spine"
)

// BenchmarkPooledTinyAgainst runs tiny programs in pooled runs of the data
// Guest as built here and of the same Guest with the standard library (the
// default Guest's python311.zip, which holds the Guest's Python) that
// SPINE_BASELINE_STDLIB names, alternating in blocks of 20 in one process, and
// reports each one's median and the ratio now / baseline.
func BenchmarkPooledTinyAgainst(b *testing.B) {
	path := os.Getenv("SPINE_BASELINE_STDLIB")
	if path == "" {
		b.Skip("SPINE_BASELINE_STDLIB names no baseline python311.zip")
	}
	zip, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	baseline := Artifact()
	baseline.StdlibZip = zip
	ctx := context.Background()
	var runners [2]*spine.Runner
	for i, a := range []*spine.Artifact{Artifact(), baseline} {
		r, err := spine.New(ctx, nil, &spine.Options{Artifact: a})
		if err != nil {
			b.Fatal(err)
		}
		defer r.Close(ctx)
		runners[i] = r
	}
	for _, c := range []struct{ name, src string }{{"empty", ""}, {"expression", "1 + 1"}} {
		b.Run(c.name, func(b *testing.B) {
			var samples [2][]time.Duration
			const block = 20
			for done := 0; done < b.N; done += block {
				for k, r := range runners {
					for i := 0; i < block; i++ {
						start := time.Now()
						if _, err := r.Run(ctx, spine.Request{Source: c.src}); err != nil {
							b.Fatal(err)
						}
						samples[k] = append(samples[k], time.Since(start))
					}
				}
			}
			median := func(s []time.Duration) float64 {
				sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
				return float64(s[len(s)/2])
			}
			now, before := median(samples[0]), median(samples[1])
			b.ReportMetric(now, "p50-ns")
			b.ReportMetric(before, "baseline-p50-ns")
			b.ReportMetric(now/before, "ratio")
		})
	}
}
