package tests

import (
	"context"
	"strings"
	"testing"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/internal/spinetest"
)

// The tests in this file run the Guest's batteries — zlib, gzip, zipfile, bz2,
// lzma, sqlite3, zoneinfo — in the real Guest. Known values come from outside
// the Guest (CPython 3.11 on Debian with the system's libraries), so a build
// that gets them wrong fails here.

// batteryMessage is the plain text of the known compressed blobs below.
const batteryMessage = `b"Spine batteries: " + bytes(range(256)) * 4`

func TestGuestBatteriesCompression(t *testing.T) {
	r := shared(t)
	for _, tc := range []struct{ name, src, want string }{
		{"zlib round trip", `import zlib
data = b"spine " * 10000 + bytes(range(256))
packed = zlib.compress(data, 9)
result = [zlib.decompress(packed) == data, len(packed) < len(data) // 50]`, `[true,true]`},
		{"zlib streaming", `import zlib
c = zlib.compressobj(6, zlib.DEFLATED, -15)
raw = c.compress(b"abc" * 1000) + c.flush()
d = zlib.decompressobj(-15)
result = d.decompress(raw, 100) + d.decompress(d.unconsumed_tail) == b"abc" * 1000`, `true`},
		{"zlib checksums", `import zlib, binascii
s = b"The quick brown fox jumps over the lazy dog"
result = [zlib.crc32(s), zlib.adler32(s), zlib.crc32(b""), zlib.adler32(b"Wikipedia"), binascii.crc32(s)]`,
			`[1095738169,1541148634,0,300286872,1095738169]`},
		{"zlib known blob", `import zlib, base64
blob = base64.b64decode("eNoLLsjMS1VISiwpSS3KTC22UmBgZGJmYWVj5+Dk4ubh5eMXEBQSFhEVE5eQlJKWkZWTV1BUUlZRVVPX0NTS1tHV0zcwNDI2MTUzt7C0sraxtbN3cHRydnF1c/fw9PL28fXzDwgMCg4JDQuPiIyKjomNi09ITEpOSU1Lz8jMys7JzcsvKCwqLiktK6+orKquqa2rb2hsam5pbWvv6Ozq7unt658wcdLkKVOnTZ8xc9bsOXPnzV+wcNHiJUuXLV+xctXqNWvXrd+wcdPmLVu3bd+xc9fuPXv37T9w8NDhI0ePHT9x8tTpM2fPnb9w8dLlK1evXb9x89btO3fv3X/w8NHjJ0+fPX/x8tXrN2/fvf/w8dPnL1+/ff/x89fvP3///R/1/6j/R7L/ARBgBFs=")
result = zlib.decompress(blob) == ` + batteryMessage, `true`},
		{"zlib bad data", `import zlib
try:
    zlib.decompress(b"not zlib at all")
except zlib.error as e:
    result = "error" in str(e) or "incorrect" in str(e)`, `true`},
		{"gzip", `import gzip, base64
data = bytes(range(256)) * 100
blob = base64.b64decode("H4sIAAAAAAACAwsuyMxLVUhKLClJLcpMLbZSYGBkYmZhZWPn4OTi5uHl4xcQFBIWERUTl5CUkpaRlZNXUFRSVlFVU9fQ1NLW0dXTNzA0MjYxNTO3sLSytrG1s3dwdHJ2cXVz9/D08vbx9fMPCAwKDgkNC4+IjIqOiY2LT0hMSk5JTUvPyMzKzsnNyy8oLCouKS0rr6isqq6pratvaGxqbmlta+/o7Oru6e3rnzBx0uQpU6dNnzFz1uw5c+fNX7Bw0eIlS5ctX7Fy1eo1a9et37Bx0+YtW7dt37Fz1+49e/ftP3Dw0OEjR48dP3Hy1OkzZ8+dv3Dx0uUrV69dv3Hz1u07d+/df/Dw0eMnT589f/Hy1es3b9+9//Dx0+cvX799//Hz1+8/f//9H/X/qP9Hsv8BKi1UUREEAAA=")
result = [gzip.decompress(gzip.compress(data, mtime=0)) == data, gzip.decompress(blob) == ` + batteryMessage + `]`, `[true,true]`},
		{"bz2", `import bz2, base64
data = b"spine " * 5000
blob = base64.b64decode("QlpoOTFBWSZTWcjMfoQAAKn/////////////////////////////////////////////wAIcAAEmAAmAAJgAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAkwAEwABMAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAEmAAmAAJgAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAFVVSeUxom00T0CY0aBGBGADQDQAEw0ARgCYAZATAAAAAmCYE0wAACYmIxGABMAAAABNGIf4RqAIE+UjZHCOkER4j58xICDJCQhIiRnzkKSQkpJiTkoPoJSSolZDEsJaQ5ES8tMwJiTI+k+omZNCak2JuTg+s+wnJOidk8J6T4n5QCglCKGRBF0UhijFHKQUkpRElLKYU0pxTyoFRKkVMqhVSrH2lXKwVkrRFEVWyuFdK8V8sBYSxH3H3ljLIWUsxaIm0EAWkuVrIy31EtpbiMuBFxwuRcy6EDdSDJbFkEQcYfJICEhaKQBdi7l4LyXovZ+JfC+l+L+YAwJgjBmEMKYYw5iDEmKMWYwxpjjHmQMiZIyZlDKmWMuZgzJ+RmjNmcM6Z4/Mz5oDQmiNGaQ/Q0p+ppjTmoNSao1ZrDWmuNebA2JsjZm0NqbY25uDcn7G6N2bw/c3pvjfn8H8nAOCcI/o/s4ZxDinGOOcg5JyjlnMOac4/w550DonSOmdQ6p1jrnYOydo7Z3DuneO+eA8J4jxnkPKeY856D0nqPWew9p/p7j/j/z3nwPiLuSKcKEhkZj9CA")
packed = bz2.compress(data)
result = [bz2.decompress(packed) == data, len(packed) < 200, bz2.decompress(blob) == ` + batteryMessage + `]`, `[true,true,true]`},
		{"lzma", `import lzma, base64
data = b"spine " * 5000
blob = base64.b64decode("/Td6WFoAAATm1rRGAgAhARYAAAB0L+Wj4AQQAQBdACmcCScPn6Duphw8X6m6L+qtwHzciUVmzsRBwLTRBXJe9gxe/Z7+Dqsy/s0WZVGrqrGMTP1Lrh7UWl5ZcVQN8tCBSdgeUUD7kf4dp6FJDMXV+d9TN8l8cRiI+INxIBgJNMA+NNksFJ42x31Zw1pyxdbu5AV1mYdYHRZoRVbnIkLH1twAQAtKjAsF/fKoFdlxCeLO96jjM21UMnqwGbELSXZQNUtTwU4fK06B7dhu9XMeJIyvcj/9H4fH7jGeZ3RIfO7DE3lsAtsb/aO4WOEX3S6cnf1UKyJoVqqIltIqIIIG0/ZyXsdslRp+mpBhkrxZQshWEmpV00Cp6qPaZzlAQAAAPVsA63K+K/gAAZwCkQgAAPyG3tixxGf7AgAAAAAEWVo=")
result = [lzma.decompress(lzma.compress(data)) == data,
          lzma.decompress(lzma.compress(data, format=lzma.FORMAT_ALONE)) == data,
          lzma.decompress(blob) == ` + batteryMessage + `,
          lzma.is_check_supported(lzma.CHECK_SHA256)]`, `[true,true,true,true]`},
		{"zipfile deflated in memory", `import io, zipfile
buf = io.BytesIO()
with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
    zf.writestr("a.txt", "hello " * 1000)
    zf.writestr("dir/b.bin", bytes(range(256)))
buf.seek(0)
with zipfile.ZipFile(buf) as zf:
    infos = {i.filename: i.compress_type for i in zf.infolist()}
    result = [zf.read("a.txt") == b"hello " * 1000, zf.read("dir/b.bin") == bytes(range(256)),
              infos == {"a.txt": zipfile.ZIP_DEFLATED, "dir/b.bin": zipfile.ZIP_DEFLATED}, zf.testzip()]`,
			`[true,true,true,null]`},
		{"shutil archive formats", `import shutil
result = sorted(name for name, _ in shutil.get_archive_formats())`, `["bztar","gztar","tar","xztar","zip"]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := spinetest.MustRun(t, r, spine.Request{Source: tc.src})
			if string(out.Value) != tc.want {
				t.Fatalf("value = %s, want %s", out.Value, tc.want)
			}
		})
	}
}

func TestGuestBatteriesSQLite(t *testing.T) {
	r := shared(t)
	for _, tc := range []struct{ name, src, want string }{
		{"version", `import sqlite3
result = [sqlite3.sqlite_version, sqlite3.connect(":memory:").execute("select sqlite_compileoption_used('THREADSAFE=0')").fetchone()[0]]`,
			`["3.40.1",1]`},
		{"create insert query", `import sqlite3
db = sqlite3.connect(":memory:")
db.execute("create table t (id integer primary key, name text, price real)")
db.executemany("insert into t (name, price) values (?, ?)", [("book", 21.5), ("pen", 2.0), ("ink", None)])
rows = db.execute("select id, name, price from t order by id").fetchall()
result = [list(r) for r in rows] + [db.execute("select count(*), sum(price) from t").fetchone()]`,
			`[[1,"book",21.5],[2,"pen",2.0],[3,"ink",null],[3,23.5]]`},
		{"transactions", `import sqlite3
db = sqlite3.connect(":memory:")
db.execute("create table t (x)")
with db:
    db.execute("insert into t values (1)")
try:
    with db:
        db.execute("insert into t values (2)")
        raise ValueError("undo")
except ValueError:
    pass
db.execute("insert into t values (3)")
db.rollback()
db.execute("savepoint s")
db.execute("insert into t values (4)")
db.execute("rollback to s")
db.execute("release s")
db.commit()
result = [r[0] for r in db.execute("select x from t")]`, `[1]`},
		{"user functions", `import sqlite3
db = sqlite3.connect(":memory:")
db.create_function("double", 1, lambda x: x * 2, deterministic=True)
class Total:
    def __init__(self): self.n = 0
    def step(self, x): self.n += x
    def finalize(self): return self.n
db.create_aggregate("total_of", 1, Total)
db.create_collation("reverse", lambda a, b: (a < b) - (a > b))
db.execute("create table t (x)")
db.executemany("insert into t values (?)", [(1,), (2,), (3,)])
result = [db.execute("select double(21)").fetchone()[0],
          db.execute("select total_of(x) from t").fetchone()[0],
          [r[0] for r in db.execute("select cast(x as text) from t order by 1 collate reverse")]]`,
			`[42,6,["3","2","1"]]`},
		{"built-in extensions", `import sqlite3
db = sqlite3.connect(":memory:")
db.execute("create virtual table docs using fts5(body)")
db.executemany("insert into docs values (?)", [("the spine of a book",), ("a sandbox",)])
result = [db.execute("select json_extract('{\"a\": [1, 2]}', '$.a[1]')").fetchone()[0],
          db.execute("select round(sqrt(16) + pi(), 3)").fetchone()[0],
          db.execute("select body from docs where docs match 'spine'").fetchone()[0]]`,
			`[2,7.142,"the spine of a book"]`},
		{"temporary files in memory", `import sqlite3, random
db = sqlite3.connect(":memory:")
db.execute("pragma cache_size = 8")
db.execute("create temp table t (k, v)")
rnd = random.Random(7)
db.executemany("insert into t values (?, ?)", ((rnd.random(), "x" * 100) for _ in range(20000)))
keys = [r[0] for r in db.execute("select k from t order by k")]
result = [len(keys), keys == sorted(keys), db.execute("select count(distinct v) from t").fetchone()[0]]`,
			`[20000,true,1]`},
		{"row factory and types", `import sqlite3, datetime
db = sqlite3.connect(":memory:", detect_types=sqlite3.PARSE_DECLTYPES)
db.row_factory = sqlite3.Row
db.execute("create table t (b blob, n integer)")
db.execute("insert into t values (?, ?)", (b"\x00\x01", 2**62))
row = db.execute("select * from t").fetchone()
result = [row.keys(), list(row["b"]), row["n"] == 2**62]`, `[["b","n"],[0,1],true]`},
		{"serialize", `import sqlite3
db = sqlite3.connect(":memory:")
db.execute("create table t (x)")
db.execute("insert into t values ('kept')")
db.commit()
copy = sqlite3.connect(":memory:")
copy.deserialize(db.serialize())
result = copy.execute("select x from t").fetchone()[0]`, `"kept"`},
		{"a file database in the working directory and in /tmp", `import sqlite3, os
db = sqlite3.connect("shop.db")
db.execute("create table t (x)")
db.executemany("insert into t values (?)", [(i,) for i in range(500)])
db.commit()
db.execute("insert into t values (-1)")
db.rollback()
other = sqlite3.connect("shop.db")
seen = other.execute("select count(*), sum(x) from t").fetchone()
other.close()
db.close()
again = sqlite3.connect("shop.db")
tmp = sqlite3.connect("/tmp/scratch.db")
tmp.execute("create table u (y)")
tmp.execute("insert into u values ('z')")
tmp.commit()
result = [list(seen), again.execute("select max(x) from t").fetchone()[0],
          tmp.execute("select y from u").fetchone()[0], sorted(os.listdir("."))]`,
			`[[500,124750],499,"z",["shop.db"]]`},
		{"no file system to write", `import sqlite3
try:
    sqlite3.connect("/usr/local/lib/new.db").execute("create table t (x)")
    result = "opened"
except sqlite3.OperationalError as e:
    result = str(e)`, `"unable to open database file"`},
		{"no extension loading", `import sqlite3
result = hasattr(sqlite3.connect(":memory:"), "enable_load_extension")`, `false`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := spinetest.MustRun(t, r, spine.Request{Source: tc.src})
			if string(out.Value) != tc.want {
				t.Fatalf("value = %s, want %s", out.Value, tc.want)
			}
		})
	}
	t.Run("syntax error is a Python error", func(t *testing.T) {
		_, err := r.Run(context.Background(), spine.Request{Source: "import sqlite3\nsqlite3.connect(':memory:').execute('selec 1')"})
		pe := spinetest.PythonError(t, err)
		if pe.Type != "OperationalError" || !strings.Contains(pe.Message, "syntax error") {
			t.Fatalf("got %#v", pe)
		}
	})
}

func TestGuestBatteriesZoneinfo(t *testing.T) {
	r := shared(t)
	for _, tc := range []struct{ name, src, want string }{
		{"Paris across the spring change", `from zoneinfo import ZoneInfo
from datetime import datetime, timedelta, timezone
paris = ZoneInfo("Europe/Paris")
utc = datetime(2026, 3, 29, 0, 59, tzinfo=timezone.utc)
result = [(utc + timedelta(minutes=m)).astimezone(paris).isoformat() for m in (0, 1)]`,
			`["2026-03-29T01:59:00+01:00","2026-03-29T03:00:00+02:00"]`},
		{"Paris in the autumn fold", `from zoneinfo import ZoneInfo
from datetime import datetime
paris = ZoneInfo("Europe/Paris")
result = [str(datetime(2026, 10, 25, 2, 30, fold=f, tzinfo=paris).utcoffset()) for f in (0, 1)] + [
    datetime(2026, 10, 25, 2, 30, tzinfo=paris).tzname(), datetime(2026, 1, 1, tzinfo=paris).tzname()]`,
			`["2:00:00","1:00:00","CEST","CET"]`},
		{"beyond the last transition", `from zoneinfo import ZoneInfo
from datetime import datetime
ny = ZoneInfo("America/New_York")
result = [str(datetime(2101, 7, 1, tzinfo=ny).utcoffset()), str(datetime(2101, 1, 1, tzinfo=ny).utcoffset())]`,
			`["-1 day, 20:00:00","-1 day, 19:00:00"]`},
		{"UTC", `from zoneinfo import ZoneInfo
from datetime import datetime
result = [str(datetime(2026, 6, 1, tzinfo=ZoneInfo(k)).utcoffset()) for k in ("UTC", "Etc/UTC", "Etc/GMT-14")]`,
			`["0:00:00","0:00:00","14:00:00"]`},
		{"available time zones", `import zoneinfo
zones = zoneinfo.available_timezones()
result = [len(zones) > 400, "Europe/Paris" in zones, "America/Argentina/Buenos_Aires" in zones,
          any("__init__" in z for z in zones)]`, `[true,true,true,false]`},
		{"tzdata version", `import tzdata
result = tzdata.__version__`, `"2026f"`},
		// A folder's key fails as zoneinfo fails with the tzdata distribution: IsADirectoryError.
		{"bad keys", `import zoneinfo
out = []
for key in ["Mars/Olympus_Mons", "Europe", "Europe/", "__init__", "Europe/__init__.pyc", "zones",
            "../../python311.zip", "/etc/passwd", "Europe/../UTC", "", "Europe\x00/Paris"]:
    try:
        zoneinfo.ZoneInfo(key)
        out.append("loaded " + key)
    except zoneinfo.ZoneInfoNotFoundError:
        out.append("not found")
    except ValueError:
        out.append("invalid")
    except IsADirectoryError:
        out.append("folder")
result = out`, `["not found","folder","invalid","not found","invalid","not found","invalid","invalid","invalid","invalid","invalid"]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := spinetest.MustRun(t, r, spine.Request{Source: tc.src})
			if string(out.Value) != tc.want {
				t.Fatalf("value = %s, want %s", out.Value, tc.want)
			}
		})
	}
}

// TestGuestBatteriesNoStateLeaks: a run that leaves a database, an open stream
// and a cached zone behind hands the next run on the same Guest none of them.
func TestGuestBatteriesNoStateLeaks(t *testing.T) {
	r := spinetest.NewRunner(t, spinetest.NewTools().Manifest(), &spine.Options{PoolSize: 1})
	spinetest.MustRun(t, r, spine.Request{Source: `import sqlite3, zlib, zoneinfo, builtins
builtins.kept_db = sqlite3.connect(":memory:")
builtins.kept_db.execute("create table leak (x)")
builtins.kept_stream = zlib.decompressobj()
builtins.kept_stream.decompress(zlib.compress(b"abc")[:3])
tokyo = zoneinfo.ZoneInfo("Asia/Tokyo")
`})
	out := spinetest.MustRun(t, r, spine.Request{Source: `import builtins, sys, sqlite3
result = [hasattr(builtins, "kept_db"), hasattr(builtins, "kept_stream"),
          sqlite3.connect(":memory:").execute("select count(*) from sqlite_master").fetchone()[0],
          "tzdata.zoneinfo.Asia" in sys.modules]`})
	if string(out.Value) != `[false,false,0,false]` {
		t.Fatalf("value = %s", out.Value)
	}
}
