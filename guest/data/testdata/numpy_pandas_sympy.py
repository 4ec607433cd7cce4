# numpy, pandas and sympy together on a file the run was given (sales.csv): the data
# Guest prints what native numpy 1.24.2, pandas 1.5.3 and sympy 1.11.1 print, byte for
# byte (guest/data's tests and make data-test compare them).
import numpy as np
import pandas as pd
import sympy as sp

sales = pd.read_csv("sales.csv", parse_dates=["date"]).dropna()
daily = sales.groupby("date")["units"].sum()
days = (daily.index - daily.index[0]).days.to_numpy(dtype=float)
units = daily.to_numpy()
slope, intercept = np.polyfit(days, units, 1)
print(len(daily), np.round([slope, intercept], 6))

t = sp.symbols("t")
trend = sp.nsimplify(round(slope, 4)) * t + sp.nsimplify(round(intercept, 2))
print(trend, sp.integrate(trend, (t, 0, 30)), sp.solve(sp.Eq(trend, 25), t))
f = sp.lambdify(t, trend, "numpy")
fit = pd.Series(f(days), index=daily.index, name="trend")
print(pd.concat([daily, fit.round(3)], axis=1).head())
resid = units - fit.to_numpy()
print(round(float(resid.std()), 6), int(np.argmax(np.abs(resid))))

M = sp.Matrix(sales.pivot_table(values="units", index="store", columns="product", aggfunc="count").to_numpy(dtype=int).tolist())
print(M, M.rank(), M.T * M == (M.T * M).T)
w = pd.Series(np.linalg.eigvalsh(np.array((M.T * M).tolist(), dtype=float)).round(6), name="eig")
print(w.describe())
