# pandas on the run's files (sales.csv and stores.csv, given with the request): the data
# Guest prints what native pandas 1.5.3 with numpy 1.24.2 prints, byte for byte
# (guest/data's tests and make data-test compare them).
import io

import numpy as np
import pandas as pd

pd.set_option("display.width", 100)
sales = pd.read_csv("sales.csv", parse_dates=["date"])
stores = pd.read_csv("stores.csv", parse_dates=["opened"])
print(pd.__version__, sales.shape, stores.shape)
print(sales.dtypes)
print(sales.head())
print(sales.isna().sum())

sales["revenue"] = sales["units"].fillna(0) * sales["price"]
print(sales.describe())
print(sales.describe(include="object"))

by_store = sales.groupby("store").agg(
    orders=("product", "count"), units=("units", "sum"), revenue=("revenue", "sum"), top=("price", "max")
)
print(by_store.round(2))
print(sales.groupby(["store", "product"])["units"].mean().round(3).unstack())
print(sales.groupby("product")["price"].describe().round(2))

merged = sales.merge(stores, on="store", how="left", indicator=True)
print(merged["_merge"].value_counts())
print(merged.loc[merged["manager"].isna(), ["date", "store"]].head(3))
outer = by_store.reset_index().merge(stores, on="store", how="outer").sort_values("store")
print(outer)

pivot = pd.pivot_table(sales, values="revenue", index="product", columns="store", aggfunc="sum", fill_value=0, margins=True)
print(pivot.round(2))

ts = sales.set_index("date").sort_index()
print(type(ts.index).__name__, ts.index.min(), ts.index.max(), ts.index.freq)
weekly = ts["revenue"].resample("W").sum()
print(weekly.head(6).round(2))
monthly = ts.resample("M").agg({"units": "sum", "price": "mean", "revenue": "sum"})
print(monthly.round(2))
print(ts["units"].rolling("14D").sum().tail(4))
rng = pd.date_range("2024-03-30 22:00", periods=4, freq="H", tz="Europe/Paris")
print(rng)
print(rng.tz_convert("UTC"))
print(pd.Timestamp("2024-02-29") + pd.offsets.MonthEnd(1), pd.Timedelta("1 days 2 hours") * 3)

monthly.to_csv("monthly.csv", float_format="%.2f")
print(open("monthly.csv").read())
buf = io.StringIO()
pivot.to_csv(buf)
back = pd.read_csv(io.StringIO(buf.getvalue()), index_col=0)
print(back.shape, back.columns.tolist(), (back - pivot).abs().max().max() < 1e-9)
print(sales.to_json(orient="records", date_format="iso")[:160])

frame = pd.DataFrame({"k": list("abcabc"), "half": [0, 0, 0, 1, 1, 1], "v": np.arange(6, dtype=np.int64) ** 2,
                      "w": np.linspace(0, 1, 6)})
print(frame.pivot(index="k", columns="half", values="v"))
print(frame.groupby("k").transform("cumsum"))
print(pd.concat([frame.head(2), frame.tail(2)]).reset_index(drop=True))
cats = pd.Categorical(["lo", "hi", "mid", "lo"], categories=["lo", "mid", "hi"], ordered=True)
print(pd.Series(cats).sort_values().tolist(), pd.cut([1, 5, 9], bins=[0, 3, 6, 10]).astype(str).tolist())
print(pd.Series([1.5, None, 3.25]).interpolate().tolist(), pd.Series(["a b", "c"]).str.split().tolist())
