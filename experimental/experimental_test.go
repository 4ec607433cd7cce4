package experimental_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/experimental"
)

// TestWithStart: each start mode New is given is the one its runs use, and
// a run works in each.
func TestWithStart(t *testing.T) {
	ctx := context.Background()
	m := spine.Manifest{"lookup": {Call: func(ctx context.Context, args json.RawMessage) (any, error) { return 21, nil }}}
	for mode, want := range map[experimental.StartMode]string{
		experimental.StartFresh: "fresh",
		experimental.StartCopy:  "copy",
	} {
		r, err := spine.New(experimental.WithStart(ctx, mode), m, &spine.Options{PoolSize: -1})
		if err != nil {
			t.Fatal(err)
		}
		out, err := r.Run(ctx, spine.Request{Source: `lookup() * 3`})
		if err != nil || string(out.Value) != "63" || r.Stats().Start != want {
			t.Errorf("%s: %v %v, Stats().Start %q", want, out, err, r.Stats().Start)
		}
		r.Close(ctx)
	}
	r, err := spine.New(ctx, m, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	if got := r.Stats().Start; got != "cow" && got != "copy" {
		t.Errorf("the default start mode is %q", got)
	}
}
