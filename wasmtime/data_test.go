package wasmtime

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/guest/data"
	"github.com/spine-run/spine/internal/warmup"
)

// dataConfig is an Engine of the data Guest as the Runner makes its image:
// the packages beside the standard library, on sys.path, and the modules it
// preloads imported by the warm-up.
func dataConfig(cacheDir string) Config {
	a := data.Artifact()
	warm, _ := warmup.With([]string{warmup.DataZip}, a.Preload)
	return Config{CacheDir: cacheDir, Warm: request(warm, false), Artifact: a}
}

var (
	dataOnce   sync.Once
	dataEngine *Engine
	dataErr    error
)

// testDataEngine is one data Guest Engine for the package's tests; the
// first test process compiles it (minutes), later ones load it from the
// cache.
func testDataEngine(t testing.TB) *Engine {
	dataOnce.Do(func() { dataEngine, dataErr = New(context.Background(), dataConfig(testCache(t))) })
	if dataErr != nil {
		t.Fatal(dataErr)
	}
	return dataEngine
}

// dataPrograms are a numpy and a pandas program with what they print and
// their value.
var dataPrograms = []struct{ name, source, value string }{
	{"numpy", `import numpy as np
a = np.arange(12, dtype=float).reshape(3, 4)
print(a @ a.T)
print(np.linalg.solve([[3.0, 1.0], [1.0, 2.0]], [9.0, 8.0]), np.fft.fft([1, 0, 0, 0]).real)
result = [float(a.std()), np.random.default_rng(7).integers(0, 100, 5).tolist()]
`, `[3.452052529534663,[94,62,68,89,57]]`},
	{"pandas", `import io
import pandas as pd
df = pd.read_csv(io.StringIO("k,v,d\na,1,2024-01-01\nb,2,2024-01-02\na,3,2024-01-05\n"), parse_dates=["d"])
print(df.groupby("k")["v"].agg(["sum", "mean"]))
print(df.set_index("d").resample("2D")["v"].sum())
result = df.groupby("k")["v"].sum().to_dict()
`, `{"a":4,"b":2}`},
}

// TestDataGuest: the data Guest runs a numpy and a pandas program on
// wasmtime and answers as the Runner with the data Guest on wazero does:
// the same value and the same output.
func TestDataGuest(t *testing.T) {
	ctx := context.Background()
	r, err := spine.New(ctx, nil, &spine.Options{Artifact: data.Artifact(), PoolSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	g, err := testDataEngine(t).NewGuest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if g != nil {
			g.Close()
		}
	}()
	for _, p := range dataPrograms {
		want, err := r.Run(ctx, spine.Request{Source: p.source})
		if err != nil {
			t.Fatalf("%s on wazero: %v", p.name, err)
		}
		if string(want.Value) != p.value {
			t.Fatalf("%s on wazero: value %s, want %s (stderr %s)", p.name, want.Value, p.value, want.Stderr)
		}
		resp, err := g.Execute(ctx, request(p.source, false))
		if err != nil {
			t.Fatalf("%s on wasmtime: %v", p.name, err)
		}
		var got struct{ Value json.RawMessage }
		if err := json.Unmarshal(resp, &got); err != nil || string(got.Value) != p.value {
			t.Fatalf("%s on wasmtime: response %s, want the value %s", p.name, resp, p.value)
		}
		if stdout, _ := g.Output(); stdout != want.Stdout || stdout == "" {
			t.Errorf("%s printed on wasmtime:\n%s\non wazero:\n%s", p.name, stdout, want.Stdout)
		}
		// A run whose memory grew past the image leaves a Guest that
		// cannot be reset (the pandas one grows it by a few pages).
		if g, err = resetOrRenew(ctx, testDataEngine(t), g); err != nil && !errors.Is(err, ErrNotReusable) {
			t.Fatalf("reset after %s: %v", p.name, err)
		}
	}
}

// resetOrRenew resets g, or, when it cannot be reset (its memory grew past
// the image), closes it and answers a new Guest with ErrNotReusable.
func resetOrRenew(ctx context.Context, e *Engine, g *Guest) (*Guest, error) {
	err := g.Reset()
	if !errors.Is(err, ErrNotReusable) {
		return g, err
	}
	g.Close()
	n, nerr := e.NewGuest(ctx)
	if nerr != nil {
		return nil, nerr
	}
	return n, err
}
