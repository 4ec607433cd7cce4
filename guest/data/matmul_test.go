package data

import (
	"encoding/json"
	"testing"
)

// TestMatmulInNumpysOrder: numpy.patch gives matmul without a BLAS a loop
// of its own (a row of the result at a time, four products per pass). Each
// element of its result must still be the sum numpy's loop makes, its
// products added in order from 0, to the bit: checked here against that sum
// made one scalar at a time, for every dtype the loop serves, lengths that
// are and are not multiples of four, empty operands, transposed, reversed
// and stacked operands, NaN, infinities and -0.0.
func TestMatmulInNumpysOrder(t *testing.T) {
	out := run(t, `import numpy as np, warnings
warnings.simplefilter("ignore")
rng = np.random.default_rng(3)
special = np.array([np.nan, np.inf, -np.inf, -0.0])
checked, wrong = 0, []
for dt in (np.float64, np.float32, np.longdouble, np.int64, np.int32, np.int8, np.uint16, np.uint8):
    for m, k, p in [(1, 1, 1), (3, 4, 5), (7, 1, 9), (5, 9, 3), (2, 13, 6), (4, 0, 3), (0, 3, 2), (6, 8, 0), (3, 16, 2)]:
        a = (rng.standard_normal((2, m, k)) * 60).astype(dt)
        b = (rng.standard_normal((k, p)) * 60).astype(dt)
        if dt in (np.float64, np.float32) and a.size > 5:
            a.flat[1:5] = special.astype(dt)
        for x, y in [(a, b), (np.asfortranarray(a[1]), b), (a[0], np.asfortranarray(b)), (a[1][:, ::-1], b[::-1, :]), (a, b[:, ::-1])]:
            r = x @ y
            xs = x if x.ndim == 3 else x[None]
            rs = r if r.ndim == 3 else r[None]
            for s in range(xs.shape[0]):
                for i in range(m):
                    for j in range(p):
                        acc = dt(0)
                        for n in range(k):
                            acc = dt(acc + xs[s, i, n] * y[n, j])
                        checked += 1
                        if np.array(acc, dt).tobytes() != np.array(rs[s, i, j], dt).tobytes():
                            wrong.append(f"{np.dtype(dt)} {m}x{k}x{p} [{s},{i},{j}]: {rs[s, i, j]!r}, in order {acc!r}")
result = {"checked": checked, "wrong": wrong[:10]}`)
	var got struct {
		Checked int
		Wrong   []string
	}
	if err := json.Unmarshal(out.Value, &got); err != nil {
		t.Fatal(err)
	}
	if got.Checked < 5000 || len(got.Wrong) > 0 {
		t.Fatalf("%d elements checked; not numpy's sums: %q", got.Checked, got.Wrong)
	}
}
