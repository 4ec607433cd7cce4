# numpy and sympy together: the data Guest prints what native numpy 1.24.2 and sympy
# 1.11.1 print, byte for byte (guest/data's tests and make data-test compare them).
import io

import numpy as np
import sympy as sp

x, y = sp.symbols("x y")
print(sp.integrate(sp.sin(x) ** 2, x))
print(sp.simplify(sp.sin(x) ** 2 + sp.cos(x) ** 2), sp.Rational(1, 3) + sp.Rational(1, 6))
print(sp.solve([x + y - 3, x - y - 1], [x, y]), sp.solve(x**2 - 2, x))
print(sp.series(sp.exp(x), x, 0, 5), sp.limit(sp.sin(x) / x, x, 0))
M = sp.Matrix([[2, 1], [1, 3]])
print(M.det(), M.inv(), M.eigenvals())
print(np.linalg.eigvalsh(np.array(M.tolist(), dtype=float)))

f = sp.lambdify(x, sp.diff(sp.exp(-x**2), x), "numpy")
xs = np.linspace(-2, 2, 9)
print(np.round(f(xs), 6))

rng = np.random.default_rng(7)
data = rng.normal(size=(4, 3))
print(data.mean(axis=0), data.std(), np.median(data))
print(np.fft.rfft(np.arange(8.0)).round(6))
A = np.array([[3.0, 1, 2], [1, 4, 1], [2, 1, 5]])
print(np.linalg.solve(A, [1, 2, 3]), round(float(np.linalg.det(A)), 9))
print(np.einsum("ij,jk->ik", A, A)[0], (A @ A).trace())
print(np.arange(12).reshape(3, 4) * np.array([1, 0, -1, 2]))
rec = np.array([("ada", 36.5), ("bob", 41.0)], dtype=[("name", "U5"), ("temp", "f8")])
print(rec[rec["temp"] > 40]["name"], np.sort(rec, order="temp")["name"])
days = np.arange("2024-02-27", "2024-03-02", dtype="datetime64[D]")
print(days, np.busday_count("2024-01-01", "2024-02-01"))
buf = io.BytesIO()
np.save(buf, A)
buf.seek(0)
print(np.array_equal(np.load(buf), A))
np.savez_compressed("arrays.npz", a=A, d=data)
with np.load("arrays.npz") as z:
    print(sorted(z.files), np.array_equal(z["d"], data))
np.random.seed(0)
print(np.random.rand(3), np.random.randint(0, 10, 5))
print(np.polynomial.Polynomial([1, 2, 3])(2.0), np.ma.masked_array([1, 2, 3], mask=[0, 1, 0]).sum())
print(sp.N(sp.pi, 30), sp.factorint(2**32 + 1), sp.nsimplify(0.125))
