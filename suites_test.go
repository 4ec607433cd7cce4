package spine_test

import (
	"context"
	"sync"
	"testing"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/internal/spinetest"
)

// The black-box suites (package spine_test) test the Runner through its API
// alone, with spinetest's tools and helpers. They share one Runner of
// spinetest's tools, made on first use and closed when the tests end.

var sharedRunner = sync.OnceValues(func() (*spine.Runner, error) {
	r, err := spine.New(context.Background(), spinetest.NewTools().Manifest(), nil)
	if err == nil {
		spine.AtTestExit(func() { r.Close(context.Background()) })
	}
	return r, err
})

// shared returns the suites' shared Runner.
func shared(tb testing.TB) *spine.Runner {
	tb.Helper()
	r, err := sharedRunner()
	if err != nil {
		tb.Fatal(err)
	}
	return r
}
