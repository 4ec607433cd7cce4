package spine_test

import (
	"context"
	"testing"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/internal/spinetest"
)

// The chained reads' suite is package tests' (tests/chain_test.go); its
// negative control stays here, beside NoWake (export_test.go).

// TestWholeProgramChainNeedsTheWake is the negative control: the same program
// on a Runner that never wakes the Guest. Nothing starts c's read while the
// program loops; it starts only when the program reaches c.
func TestWholeProgramChainNeedsTheWake(t *testing.T) {
	tools := spinetest.NewChainTools()
	r := spinetest.NewRunner(t, tools.Manifest(), spinetest.ChainOptions)
	spine.NoWake(r)
	out, err := r.Run(context.Background(), spine.Request{Source: spinetest.ChainSource(200, ""), EarlyReads: true})
	if err != nil {
		t.Fatal(err)
	}
	if string(out.Value) != `{"key":"alpha-beta"}` {
		t.Fatalf("value %s", out.Value)
	}
	events := tools.Log()
	if spinetest.Index(events, "probe:true") >= 0 {
		t.Fatalf("c's read started while the program looped, without a wake: %v", events)
	}
	if start := spinetest.Index(events, "start:alpha-beta"); start < len(events)-1 {
		t.Fatalf("c's read started before the loop ended: %v", events)
	}
	if c := spinetest.LastSlow(t, out); c.Early {
		t.Fatalf("c's call was answered early without a wake: %+v", out.Calls)
	}
}
