package soak

import (
	"bytes"
	"context"
	"testing"
	"time"
)

// TestSoak is the soak at a tenth of its size (the full one is `spine
// soak`): every run must get its own outcome, and the process must give back
// its goroutines, descriptors and mappings once the Runner is closed.
func TestSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("3,000 runs; skipped with -short")
	}
	// A first, small soak grows the Go heap (and its mappings) to its
	// working size; the second is the one whose before and after compare.
	if _, err := Run(context.Background(), Config{Runs: 300, Concurrency: 3}); err != nil {
		t.Fatal(err)
	}
	rep, err := Run(context.Background(), Config{Runs: 3000, Concurrency: 3, Flood: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	rep.Print(&buf)
	t.Log("\n" + buf.String())
	if rep.Failed > 0 || rep.Runs != 3000 {
		t.Fatalf("%d of %d runs did not get their own outcome", rep.Failed, rep.Runs)
	}
	for _, k := range kinds(0) {
		if rep.ByKind[k.name] == 0 {
			t.Errorf("no %s runs", k.name)
		}
	}
	if rep.FloodCycles < 1 {
		t.Errorf("the flood ran %d cycles", rep.FloodCycles)
	}
	if rep.Leaked() {
		t.Errorf("not given back: before %s; after %s", rep.Before, rep.After)
	}
	// The flood's Host memory: the Guest's own pages plus MaxDescriptors
	// descriptors, far under MemoryLimit.
	if grew := rep.FloodPeakRSS - rep.FloodStartRSS; grew > 256<<20 {
		t.Errorf("RSS grew %d MiB during the descriptor flood", grew>>20)
	}
}
