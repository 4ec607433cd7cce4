"""Unit tests of prefix mode (plm.prefix, through bootstrap.prefix_begin / prefix_feed, and
execute's "prefix").

Run natively with /usr/bin/python3.11 guest/tests/test_prefix.py; tests/plm_test.go runs this
file in the real Guest too.
"""

import json
import random
import sys

try:
    import harness
except ImportError:  # in the Guest: tests/plm_test.go passes harness.py's source in inputs
    import types

    harness = types.ModuleType("harness")
    exec(compile(inputs["harness"], "harness.py", "exec"), harness.__dict__)  # noqa: F821
    sys.modules["harness"] = harness

import bootstrap
import plm

PRICES = {"book": 21, "pen": 2, "ink": 5, "é": 7}


def lookup(args):
    if args.get("key") not in PRICES:
        raise KeyError(f"no such key: {args.get('key')}")
    return PRICES[args["key"]]


TOOLS = {
    "lookup": lookup,
    "market.get_price": lambda a: {"symbol": a["symbol"], "price": 100 + len(a["symbol"])},
    "log": lambda a: len(a),
}
EARLY = ("lookup", "market.get_price")
INPUTS = {"k": "pen", "flag": True, "syms": ["A", "BB", "CCC"], "m": {"k": "ink"}}


def begin(inputs=INPUTS, early_reads=True, cap=64):
    fake = harness.use(harness.FakeSpine(TOOLS, EARLY, cap))
    request = {
        "inputs": inputs,
        "tools": [{"name": name, "early": name in EARLY} for name in sorted(TOOLS)],
        "early_reads": early_reads,
    }
    assert bootstrap.prefix_begin(json.dumps(request).encode()) == 0
    return fake


def feed(data, sizes=None):
    """Feed data (str or bytes) in chunks of the given sizes (default: one chunk)."""
    if isinstance(data, str):
        data = data.encode()
    counts = []
    at = 0
    for size in sizes or [len(data)]:
        counts.append(bootstrap.prefix_feed(data[at : at + size]))
        at += size
    if at < len(data):
        counts.append(bootstrap.prefix_feed(data[at:]))
    return counts


def prepared(fake):
    return [(tool, args) for kind, tool, args in fake.log if kind == "prepare"]


def test_a_statement_is_read_once_a_later_line_starts():
    fake = begin()
    assert feed('a = lookup(key="pen")\n') == [0]
    assert feed("b") == [0]  # "b" could still become "else"... no, but a word may go on
    assert feed(" = 1\n") == [1]
    assert prepared(fake) == [("lookup", {"key": "pen"})]


def test_continuations_do_not_end_a_statement():
    src = """if inputs["flag"]:
    a = lookup(key="pen")
elif inputs["k"]:
    a = lookup(key="ink")
else:
    a = lookup(key="book")
try:
    b = lookup(key="book")
except RuntimeError:
    pass
finally:
    pass
c = lookup(
    key=inputs["k"]
)
# a comment at column 0

d = 1
"""
    fake = begin()
    counts = feed(src, [1] * len(src))
    assert counts[-1] == 3, counts
    assert prepared(fake) == [("lookup", {"key": "pen"}), ("lookup", {"key": "book"}), ("lookup", {"key": "pen"})], prepared(fake)


def test_blank_and_comment_lines_inside_a_block():
    src = 'for s in inputs["syms"]:\n    x = 1\n# comment\n\n    y = market.get_price(symbol=s)\nz = 1\n'
    fake = begin()
    feed(src, [3] * (len(src) // 3 + 1))
    assert prepared(fake) == [("market.get_price", {"symbol": s}) for s in ["A", "BB", "CCC"]], prepared(fake)


def test_known_values_and_going_past_what_is_not_understood():
    src = """k = inputs["k"]
n = log(msg=k)
u = str(n)
v = lookup(key=k)
w = lookup(key=u)
t = (k, inputs["m"]["k"])
x = lookup(key=t[1])
y = [market.get_price(symbol=s * 2) for s in inputs["syms"] if s != "BB"]
end = 1
"""
    fake = begin()
    feed(src)
    assert prepared(fake) == [
        ("lookup", {"key": "pen"}),
        ("lookup", {"key": "ink"}),
        ("market.get_price", {"symbol": "AA"}),
        ("market.get_price", {"symbol": "CCCCCC"}),
    ], prepared(fake)


def test_rebinding_makes_names_unknown():
    src = """k = "pen"
def change():
    global k
    k = "ink"
a = lookup(key=k)
d = {"k": "pen"}
d["k"] = "ink"
b = lookup(key=d["k"])
m = inputs["m"]
m.update(k="book")
c = lookup(key=inputs["m"]["k"])
for j in range(2):
    pass
e = lookup(key=j)
import os as inputs
f = lookup(key=inputs)
g = lookup(key="ink")
end = 1
"""
    fake = begin()
    feed(src)
    assert prepared(fake) == [("lookup", {"key": "ink"})], prepared(fake)


def test_rebound_tools_are_not_prepared():
    src = 'lookup = lambda key: key\na = lookup(key="pen")\nmarket.get_price = print\nb = market.get_price(symbol="A")\nend = 1\n'
    fake = begin()
    feed(src)
    assert prepared(fake) == [], prepared(fake)


def test_if_with_a_known_test_follows_its_branch():
    src = """if inputs["k"] == "ink":
    a = lookup(key="book")
else:
    k2 = "ink"
    a = lookup(key=k2)
b = lookup(key=k2)
if log(msg=1):
    c = lookup(key="book")
end = 1
"""
    fake = begin()
    feed(src)
    assert prepared(fake) == [("lookup", {"key": "ink"}), ("lookup", {"key": "ink"})], prepared(fake)


def test_strings_and_brackets_hide_column_0_lines():
    src = r'''a = """
b = lookup(key="book")
else
"""
c = [
1,
]
d = ("""x
# not a comment
""" + "\"")
e = lookup(key="pen")
f = r'\''
g = lookup(key="ink")  # a comment with a " quote
h = 1
'''
    fake = begin()
    counts = feed(src, [1] * len(src))
    assert prepared(fake) == [("lookup", {"key": "pen"}), ("lookup", {"key": "ink"})], prepared(fake)
    assert counts[-1] == 2, counts


def test_utf8_split_across_chunks():
    src = 'a = lookup(key="é")\nb = 1\n'
    fake = begin()
    feed(src.encode(), [1] * len(src.encode()))
    assert prepared(fake) == [("lookup", {"key": "é"})], prepared(fake)


def test_bad_streams_never_raise():
    fake = begin()
    # The first statement is complete; the bytes after it are not UTF-8: the reader stops.
    assert feed(b'a = lookup(key="pen")\n\xff\xfe = 1\nb = lookup(key="ink")\n') == [1]
    assert feed(b"more = 1\n") == [1] and plm.prefix._prefix.stopped
    fake = begin()
    assert feed("a = (\nb = 1\nc = lookup(key='pen')\nd = 1\n") == [0]  # never parses: nothing read
    assert prepared(fake) == []
    fake = begin()
    assert feed("x = 1\n" + "y = [\n" + "1,\n" * 40000) == [0]  # a statement too long to wait for
    assert plm.prefix._prefix.stopped
    assert bootstrap.prefix_begin(b"not json") == -1
    assert bootstrap.prefix_feed(b"x = 1\n") == 0  # no prefix reader: nothing to do


def test_early_reads_off_prepares_nothing():
    fake = begin(early_reads=False)
    assert feed('a = lookup(key="pen")\nb = 1\n') == [0]
    assert prepared(fake) == []


def test_pending_cap():
    fake = begin(cap=2)
    assert feed('a = [lookup(key="pen") for _ in range(10)]\nb = lookup(key="ink")\nc = 1\n') == [2]


def test_execute_claims_the_prefix_reads_in_order():
    src = """a = lookup(key="pen")
b = lookup(key=inputs["k"])
c = [market.get_price(symbol=s) for s in inputs["syms"]]
d = lookup(key=str(log(msg=1)) and "ink")
result = [a, b, c, d]
"""
    fake = begin()
    feed(src)
    assert len(prepared(fake)) == 5, prepared(fake)
    response, _, fake = harness.execute(src, TOOLS, EARLY, INPUTS, prefix=True, fake=fake)
    off, _, _ = harness.execute(src, TOOLS, EARLY, INPUTS, early_reads=False)
    assert response == off, (response, off)
    kinds = [e[0] for e in fake.log]
    # The PLM pass adopted the five prefix reads instead of preparing them again.
    assert kinds == ["prepare"] * 5 + ["claim"] * 5 + ["call", "call"], fake.log
    assert plm.pending == {} and plm.futures._spare == {}


def test_chained_reads_start_once_their_names_values_arrive():
    # a and b are bound speculatively to their reads' values when those arrive (the
    # fake's reads are done at once: at the next chunk); c reads only them, so it is
    # prepared while the program still streams, and the run claims it.
    src = 'a = lookup(key="pen")\nb = lookup(key=inputs["m"]["k"])\nx = 1\nc = lookup(key="ink" if a + b == 7 else "pen")\nresult = [a, b, c]\n'
    fake = begin()
    feed(src, [len(src) - 12, 6])
    assert prepared(fake) == [("lookup", {"key": "pen"}), ("lookup", {"key": "ink"}), ("lookup", {"key": "ink"})], fake.log
    response, _, fake = harness.execute(src, TOOLS, EARLY, INPUTS, prefix=True, fake=fake)
    off, _, _ = harness.execute(src, TOOLS, EARLY, INPUTS, early_reads=False)
    assert response == off == {"value": [2, 5, 5]}, (response, off)
    assert [e[0] for e in fake.log if e[0] != "peek"] == ["prepare"] * 3 + ["claim"] * 3, fake.log


def test_a_chained_read_is_dropped_when_its_name_changes():
    # a is rebound before its read's value arrives: c is prepared from the known 7, never
    # from the read's value; a read prepared from a stale value is only a wasted read.
    src = 'a = lookup(key="pen")\na = 7\nc = lookup(key="ink" if a == 2 else "book")\nresult = c\n'
    fake = begin()
    feed(src, [len(src) - 10, 5])
    assert prepared(fake) == [("lookup", {"key": "pen"}), ("lookup", {"key": "book"})], fake.log
    response, _, fake = harness.execute(src, TOOLS, EARLY, INPUTS, prefix=True, fake=fake)
    assert response == {"value": 21}, response


def test_prefix_and_off_give_the_same_outcomes():
    programs = [
        'a = lookup(key="pen")\nprint(a)\nb = lookup(key="nope")\n',
        'x = inputs["k"]\ntry:\n    y = lookup(key=x)\nexcept RuntimeError as e:\n    print(e)\nx = "ink"\nresult = [y, lookup(key=x)]\n',
        'out = []\nfor s in inputs["syms"]:\n    out.append(market.get_price(symbol=s)["price"])\n    if s == "BB":\n        break\nresult = out\n',
        'lookup = lambda key: key * 2\nresult = lookup(key="pen")\n',
        'k = "pen"\ndef f():\n    global k\n    k = "ink"\nf()\nresult = lookup(key=k)\n',
        'if inputs["flag"]:\n    exit()\nresult = lookup(key="pen")\n',
        'r = [lookup(key=k) for k in ["pen"] * 100]\nresult = len(r)\n',
    ]
    rng = random.Random(7)
    for src in programs:
        off, out_off, fake_off = harness.execute(src, TOOLS, EARLY, INPUTS, early_reads=False)
        for _ in range(5):
            fake = begin()
            data = src.encode()
            sizes = [rng.randint(1, 8) for _ in range(len(data))]
            feed(data, sizes)
            on, out_on, fake = harness.execute(src, TOOLS, EARLY, INPUTS, prefix=True, fake=fake)
            assert (on, out_on) == (off, out_off), (src, on, off, out_on, out_off)
            assert fake.calls() == fake_off.calls(), (src, fake.calls(), fake_off.calls())


if __name__ == "__main__":  # natively, and in the Guest (where the program is __main__)
    harness.main(globals())
