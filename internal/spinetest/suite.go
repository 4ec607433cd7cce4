package spinetest

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/spine-run/spine"
)

// SuiteManifest is the test tools (lookup, gate) and tools whose answers
// are edge cases of the bridge, the manifest of the Runner the black-box
// suites share (the root package's and package tests'):
//
//	echo(**args)          its arguments
//	fail()                the tool error "boom"
//	nothing()             None
//	unencodable()         a value JSON cannot hold
//	explode()             a panic
//	huge()                a 2 MiB string, over the bridge's 1 MiB
//	wait()                waits for the run to end
//	market.get_price(*, symbol)  a namespaced tool
func SuiteManifest() spine.Manifest {
	m := NewTools().Manifest()
	for name, call := range map[string]spine.Tool{
		"echo":        func(ctx context.Context, args json.RawMessage) (any, error) { return args, nil },
		"fail":        func(ctx context.Context, args json.RawMessage) (any, error) { return nil, errors.New("boom") },
		"nothing":     func(ctx context.Context, args json.RawMessage) (any, error) { return nil, nil },
		"unencodable": func(ctx context.Context, args json.RawMessage) (any, error) { return make(chan int), nil },
		"explode":     func(ctx context.Context, args json.RawMessage) (any, error) { panic("kaboom") },
		"huge":        func(ctx context.Context, args json.RawMessage) (any, error) { return strings.Repeat("x", 2<<20), nil },
		"wait": func(ctx context.Context, args json.RawMessage) (any, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		},
		"market.get_price": func(ctx context.Context, args json.RawMessage) (any, error) {
			var a struct {
				Symbol string `json:"symbol"`
			}
			json.Unmarshal(args, &a)
			return map[string]any{"symbol": a.Symbol, "price": 100 + len(a.Symbol)}, nil
		},
	} {
		m[name] = spine.ToolSpec{Call: call}
	}
	return m
}

// SharedRunner returns a function that gives the Runner of manifest with
// the default options, made on its first call and closed when the tests end:
// atExit registers its Close with the package's TestMain.
func SharedRunner(manifest func() spine.Manifest, atExit func(func())) func(testing.TB) *spine.Runner {
	made := sync.OnceValues(func() (*spine.Runner, error) {
		r, err := spine.New(context.Background(), manifest(), nil)
		if err == nil {
			atExit(func() { r.Close(context.Background()) })
		}
		return r, err
	})
	return func(tb testing.TB) *spine.Runner {
		tb.Helper()
		r, err := made()
		if err != nil {
			tb.Fatal(err)
		}
		return r
	}
}
