package spine_test

import (
	"context"
	"strings"
	"testing"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/internal/spinetest"
)

// TestPrefixHoldsNoValues: what prefix mode evaluated while the program
// streamed in (here two lists of a million ints, plain data it may need for a
// later read's arguments) is dropped before the program runs, so a program
// that fits the memory limit with early reads off fits it streamed.
func TestPrefixHoldsNoValues(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates near the memory limit")
	}
	src := "a = list(range(1 << 20))\nc = list(range(1 << 20))\ndata = [bytearray(1 << 20) for _ in range(120)]\nresult = len(data)\n"
	r := spinetest.NewRunner(t, suiteManifest(), &spine.Options{PoolSize: -1})
	for _, mode := range []string{"early reads off", "streamed"} {
		req := spine.Request{Source: src}
		if mode == "streamed" {
			req = spine.Request{Stream: strings.NewReader(src), EarlyReads: true}
		}
		out, err := r.Run(context.Background(), req)
		if err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		if string(out.Value) != "120" {
			t.Fatalf("%s: %s", mode, out.Value)
		}
	}
}
