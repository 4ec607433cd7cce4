package spine_test

import (
	"context"
	"testing"
	"testing/fstest"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/internal/spinetest"
)

// TestRandomFreshEveryRun: the image is captured with fixed randomness, so a
// generator seeded while it was made (random's, with random preloaded) would
// give every run the same numbers. Every run from the image, and every new
// session, draws its own; a session's later runs, and a restored session's,
// go on with the session's own sequence (docs/rationale.md).
func TestRandomFreshEveryRun(t *testing.T) {
	ctx := context.Background()
	const draw = "import random\n[random.random(), random.choices('abcdefghijklmnopqrstuvwxyz', k=16)]"
	for _, preload := range [][]string{nil, {"random"}} {
		r := spinetest.NewRunner(t, nil, &spine.Options{Preload: preload, PoolSize: 1})
		a := spinetest.MustRun(t, r, spine.Request{Source: draw})
		b := spinetest.MustRun(t, r, spine.Request{Source: draw})
		if string(a.Value) == string(b.Value) {
			t.Errorf("preload %q: two runs drew the same numbers: %s", preload, a.Value)
		}
		var firsts []string
		for range 2 {
			s, err := r.NewSession(ctx)
			if err != nil {
				t.Fatal(err)
			}
			firsts = append(firsts, spinetest.Step(t, s, draw))
			s.Close(ctx)
		}
		if firsts[0] == firsts[1] {
			t.Errorf("preload %q: two new sessions drew the same numbers: %s", preload, firsts[0])
		}
	}

	// A session goes on with its own sequence: random.Random(42).random() is
	// 0.6394267984578837, then 0.025010755222666936.
	r := spinetest.NewRunner(t, nil, &spine.Options{Preload: []string{"random"}})
	s, err := r.NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	spinetest.Step(t, s, "import random\nrandom.seed(42)")
	blob, err := s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := spinetest.Step(t, s, "random.random()"); got != "0.6394267984578837" {
		t.Errorf("the session's next run drew %s, not the seeded sequence's first number", got)
	}
	if got := spinetest.Step(t, s, "random.random()"); got != "0.025010755222666936" {
		t.Errorf("the session's third run drew %s, not the seeded sequence's second number", got)
	}
	restored, err := r.Restore(ctx, blob)
	if err != nil {
		t.Fatal(err)
	}
	defer restored.Close(ctx)
	if got := spinetest.Step(t, restored, "random.random()"); got != "0.6394267984578837" {
		t.Errorf("the restored session drew %s, not its own sequence's next number", got)
	}
}

// TestRandomPreloadedSeededWhenReached: with random preloaded, its global
// generator is seeded when a run first reaches it (world.find_generators'
// traps), not as the run starts: a run that draws nothing leaves it as the
// image has it, a name imported from random draws anew in every run, and a
// seed the program sets holds.
func TestRandomPreloadedSeededWhenReached(t *testing.T) {
	r := spinetest.NewRunner(t, nil, &spine.Options{Preload: []string{"random"}, PoolSize: 1})
	if got := spinetest.MustRun(t, r, spine.Request{Source: "import world\nlen(world._armed) > 0 and not world._eager"}); string(got.Value) != "true" {
		t.Errorf("a run that draws nothing woke random's generator, or it is not lazy: %s", got.Value)
	}
	const draw = "from random import random as r\nr()"
	if a, b := spinetest.MustRun(t, r, spine.Request{Source: draw}), spinetest.MustRun(t, r, spine.Request{Source: draw}); string(a.Value) == string(b.Value) {
		t.Errorf("%q drew %s in two runs", draw, a.Value)
	}
	for _, src := range []string{"import random\nrandom.seed(42)\nrandom.random()", "from random import seed, random\nseed(42)\nrandom()"} {
		if got := spinetest.MustRun(t, r, spine.Request{Source: src}); string(got.Value) != "0.6394267984578837" {
			t.Errorf("%q gave %s, not random.Random(42)'s first number", src, got.Value)
		}
	}
}

// TestRandomHeldElsewhere: a generator in the image that something other
// than a module holds is seeded all the same: a Random in an object's
// attribute is guarded by its own trap (lazily); one whose bound method a
// list keeps cannot be, nor one whose bound method a module's function calls
// as a global, the function kept in a list: those are seeded as every run
// starts.
func TestRandomHeldElsewhere(t *testing.T) {
	pkg := fstest.MapFS{"holder.py": {Data: []byte(`import random, reach
class Box:
    pass
box = Box()
box.rng = random.Random()
kept = [random.Random().random]
`)}, "reach.py": {Data: []byte(`import random
draw = random.Random().random
def fresh():
    return draw()
kept = [fresh]
`)}}
	r := spinetest.NewRunner(t, nil, &spine.Options{Packages: pkg, Preload: []string{"holder"}, PoolSize: 1})
	if got := spinetest.MustRun(t, r, spine.Request{Source: "import world\n[len(world._lazy), len(world._eager)]"}); string(got.Value) != "[2,2]" {
		t.Errorf("the image's lazy and eager generators: %s, want [2,2] (random's own, the box's; the kept one's, reach's)", got.Value)
	}
	for _, draw := range []string{"import holder\nholder.box.rng.random()", "import holder\nholder.kept[0]()", "import reach\nreach.kept[0]()"} {
		if a, b := spinetest.MustRun(t, r, spine.Request{Source: draw}), spinetest.MustRun(t, r, spine.Request{Source: draw}); string(a.Value) == string(b.Value) {
			t.Errorf("%q drew %s in two runs", draw, a.Value)
		}
	}
}
