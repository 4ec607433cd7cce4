"""Unit tests of the PLM pass (guest/python/plm/) and of the Guest's futures.

Run natively with /usr/bin/python3.11 guest/tests/test_plm.py; tests/plm_test.go runs this
file in the real Guest too.
"""

import ast
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

PRICES = {"book": 21, "pen": 2, "ink": 5}


def lookup(args):
    if args.get("key") not in PRICES:
        raise KeyError(f"no such key: {args.get('key')}")
    return PRICES[args["key"]]


def get_price(args):
    return {"symbol": args["symbol"], "price": 100 + len(args["symbol"])}


def log(args):
    return len(args)


TOOLS = {"lookup": lookup, "market.get_price": get_price, "log": log, "echo": lambda a: a}
EARLY = ("lookup", "market.get_price", "echo")


def rewrite(source, inputs=None):
    """The transformed source (ast.unparse of what runs), checked to run like the original."""
    on, out_on, _ = harness.execute(source, TOOLS, EARLY, inputs, transformed=True)
    off, out_off, _ = harness.execute(source, TOOLS, EARLY, inputs, early_reads=False)
    on.pop("transformed", None)
    assert on == off and out_on == out_off, (on, off, out_on, out_off)
    response, _, _ = harness.execute(source, TOOLS, EARLY, inputs, transformed=True)
    return response["transformed"]


def prepares(text):
    """The keys of each prepare statement in transformed source, with the line after it."""
    found = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        stripped = line.strip()
        if stripped.startswith("__spine_prepare"):
            call = ast.parse(stripped).body[0].value
            after = lines[i + 1].strip() if i + 1 < len(lines) else ""
            found.append(([a.value for a in call.args], after))
    return found


def same(source, inputs=None, tools=None, early=EARLY):
    """Run source with early reads off and on: everything observable must be equal.
    Returns (response, stdout, fake of the early run)."""
    tools = tools or TOOLS
    off, out_off, fake_off = harness.execute(source, tools, early, inputs, early_reads=False)
    on, out_on, fake_on = harness.execute(source, tools, early, inputs)
    assert on == off, f"\noff: {off}\non:  {on}"
    assert out_on == out_off, f"\noff: {out_off!r}\non:  {out_on!r}"
    assert fake_on.calls() == fake_off.calls(), f"\noff: {fake_off.calls()}\non:  {fake_on.calls()}"
    return on, out_on, fake_on


# --- where prepares go -------------------------------------------------------


def test_straight_line_reads_are_prepared_together():
    text = rewrite('a = lookup(key="book")\nb = lookup(key=inputs["k"])\nresult = a + b\n', {"k": "pen"})
    assert prepares(text) == [(["lookup(key=\"book\")", "lookup(key=inputs[\"k\"])"], "a = lookup(key='book')")], text


def test_dependent_read_waits_for_its_input():
    text = rewrite('a = lookup(key="book")\nlog(msg=a)\nb = lookup(key=["pen", "ink"][a % 2])\n')
    # The first read is not prepared: nothing would run between its prepare and its call.
    assert prepares(text) == [
        (['lookup(key=["pen", "ink"][a % 2])'], "log(msg=a)"),
    ], text


def test_docstring_and_future_imports_stay_first():
    text = rewrite('"""doc"""\nfrom __future__ import annotations\nlog(msg=1)\nx = lookup(key="pen")\nresult = __doc__\n')
    lines = text.splitlines()
    assert lines[0] == "\"\"\"doc\"\"\"" and lines[1].startswith("from __future__"), text
    assert lines[2].startswith("__spine_prepare("), text


def test_if_branches_are_prepared_on_entry():
    src = """x = 1
if lookup(key="pen") > x:
    log(msg=1)
    a = lookup(key="book")
elif x:
    log(msg=2)
    a = lookup(key="ink")
else:
    log(msg=3)
    a = market.get_price(symbol="ACME")
result = a
"""
    text = rewrite(src)
    keys = [k for k, _ in prepares(text)]
    assert keys == [['lookup(key="pen")'], ['lookup(key="book")'], ['lookup(key="ink")'], ['market.get_price(symbol="ACME")']], text
    assert text.index('lookup(key="book")') > text.index("if lookup"), text


def test_try_body_is_hoisted_and_handlers_prepared_on_entry():
    src = """a = lookup(key="book")
try:
    b = lookup(key="pen")
    c = lookup(key="nope")
except RuntimeError as e:
    msg = str(e)
    c = lookup(key="ink")
result = [a, b, c, msg]
"""
    text = rewrite(src)
    keys = [k for k, _ in prepares(text)]
    # lookup(key="book") is prepared although its statement comes first: the reads of the
    # try body (same tool, same keyword) are pending when it is called.
    assert keys == [['lookup(key="book")', 'lookup(key="pen")', 'lookup(key="nope")'], ['lookup(key="ink")']], text


def test_with_body_is_hoisted_unless_it_reads_the_target():
    src = """import contextlib
with contextlib.nullcontext("pen") as k:
    a = lookup(key="book")
    b = lookup(key=k)
result = [a, b]
"""
    text = rewrite(src)
    assert prepares(text) == [
        (['lookup(key="book")'], "import contextlib"),
        (["lookup(key=k)"], "a = lookup(key='book')"),
    ], text


def test_for_loop_is_prepared_at_entry():
    src = """total = 0
for s in inputs["symbols"]:
    total += market.get_price(symbol=s)["price"]
    log(msg=s)
result = total
"""
    text = rewrite(src, {"symbols": ["A", "BB", "CCC"]})
    assert prepares(text) == [(["for s in inputs[\"symbols\"]: market.get_price(symbol=s)"], "total = 0")], text
    _, _, fake = same(src, {"symbols": ["A", "BB", "CCC"]})
    assert [e[0] for e in fake.log] == ["prepare"] * 3 + ["claim", "call"] * 3, fake.log


def test_for_loop_unpacking_enumerate_and_items():
    src = """out = []
for i, s in enumerate(inputs["symbols"], 1):
    out.append([i, market.get_price(symbol=s * i)])
for k, v in inputs["m"].items():
    out.append(lookup(key=v))
result = out
"""
    inputs = {"symbols": ["A", "B"], "m": {"x": "pen", "y": "ink"}}
    text = rewrite(src, inputs)
    keys = [k for k, _ in prepares(text)]
    assert keys == [['for i, s in enumerate(inputs["symbols"], 1): market.get_price(symbol=s * i)', 'for k, v in inputs["m"].items(): lookup(key=v)']], text
    _, _, fake = same(src, inputs)
    assert len(fake.kinds("prepare")) == 4 and len(fake.kinds("claim")) == 4, fake.log


def test_for_loop_body_that_changes_the_name_is_prepared_per_iteration():
    src = """k = "pen"
out = []
for i in range(3):
    log(msg=i)
    out.append(lookup(key=k))
    k = ["book", "ink", "pen"][i]
result = out
"""
    text = rewrite(src)
    keys = [(k, after) for k, after in prepares(text)]
    assert keys == [(["lookup(key=k)"], "log(msg=i)")], text
    _, _, fake = same(src)
    assert len(fake.kinds("claim")) == 3, fake.log


def test_comprehensions_are_prepared_at_entry():
    src = """prices = [market.get_price(symbol=s)["price"] for s in inputs["symbols"] if s != "B"]
by = {s: lookup(key=k) for s, k in zip(inputs["symbols"], ["pen", "ink", "book"])}
total = sum(lookup(key=k) for k in ("pen", "ink"))
result = [prices, by, total]
"""
    inputs = {"symbols": ["A", "B", "C"]}
    text = rewrite(src, inputs)
    keys = [k for k, _ in prepares(text)]
    assert len(keys) == 1 and len(keys[0]) == 3, text
    _, _, fake = same(src, inputs)
    assert len(fake.kinds("prepare")) == 7 and len(fake.kinds("claim")) == 7, fake.log


def test_nested_comprehension_generators():
    src = 'result = [echo(a=a, b=b) for a in range(3) for b in range(a)]\n'
    _, _, fake = same(src)
    assert len(fake.kinds("prepare")) == 3 and len(fake.kinds("claim")) == 3, fake.log


def test_while_body_is_prepared_per_iteration():
    src = """n = 0
out = []
while n < 3:
    out.append(lookup(key=["pen", "ink", "book"][n]))
    n += 1
result = out
"""
    text = rewrite(src)
    # n changes after the read, so each iteration could prepare it when it starts; but the
    # read is the first thing the body does, so its prepare could not win anything.
    assert prepares(text) == [], text
    src2 = """n = 0
while n < 2:
    log(msg=n)
    x = lookup(key="pen")
    n += 1
"""
    text = rewrite(src2)
    assert prepares(text) == [(['lookup(key="pen")'], "log(msg=n)")], text


def test_function_bodies_and_lambdas_are_left_alone():
    src = """def f(k):
    return lookup(key=k) + lookup(key="pen")
g = lambda: lookup(key="ink")
result = f("book") + g()
"""
    assert prepares(rewrite(src)) == []


def test_impure_arguments_are_left_alone():
    src = """class P:
    key = "pen"
p = P()
a = lookup(key=p.key)
b = lookup(key=str(lookup(key="pen")))
c = lookup(key=[k for k in ["ink"]][0])
d = lookup(key="".join(reversed("nep")))
e = lookup(**{"key": "ink"})
result = [a, c, d, e]
"""
    keys = [k for k, _ in prepares(rewrite(src))]
    assert keys == [['lookup(key="pen")']], keys


def test_rebound_tool_names_are_left_alone():
    src = """a = lookup(key="pen")
def lookup(key):
    return key
b = lookup(key="ink")
market.get_price = lambda symbol: symbol
c = market.get_price(symbol="A")
result = [a, b, c]
"""
    assert prepares(rewrite(src)) == []


def test_programs_that_mention_the_helper_are_left_alone():
    src = 'x = "__spine_prepare"\nresult = [lookup(key="pen"), x]\n'
    assert prepares(rewrite(src)) == []
    src = 'result = [__spine_prepare("lookup(key=\'pen\')"), lookup(key="pen")]\n'
    assert prepares(rewrite(src)) == []
    same(src)


def test_names_declared_global_are_not_prepared():
    src = """k = "pen"
def change():
    global k
    k = "ink"
change()
result = lookup(key=k)
"""
    assert prepares(rewrite(src)) == []


def test_star_import_and_exec_stop_hoisting():
    src = """k = "pen"
exec("k = 'ink'")
result = [lookup(key="ink"), lookup(key=k)]
"""
    # exec may bind any name, even the ones constant arguments do not read. The first
    # read is prepared too: the second one's read is pending when it is called.
    assert prepares(rewrite(src)) == [
        (['lookup(key="ink")', "lookup(key=k)"], "result = [lookup(key='ink'), lookup(key=k)]"),
    ]


def test_positions_of_original_nodes_are_kept():
    src = 'a = 1\nif a:\n    log(msg=a)\n    b = lookup(key="pen")\n'
    tree = plm.transform(ast.parse(src), src, "<test>", {"lookup"}, {})
    inserted = tree.body[1].body[0]
    assert inserted.lineno == 3 and inserted.col_offset == 4, ast.dump(inserted, include_attributes=True)
    assert tree.body[1].body[1].lineno == 3
    compile(tree, "<test>", "exec")
    plm.reset()


# --- prepares that cannot win time are not inserted ----------------------------


def lead(stmt_src):
    """The text of the call a statement makes before doing any work, if it is a candidate."""
    tree = ast.parse(stmt_src)
    stmt = tree.body[0]
    scanner = plm.rewrite._Scanner({"lookup", "market.get_price", "echo"}, set(), stmt_src)
    found = []
    for expr in plm.rewrite._header(stmt):
        scanner.scan(expr, found)
    first = plm.rewrite._first_candidate(stmt, found) if found else None
    return [] if first is None else [first.text()]


def test_a_dependent_chain_is_not_prepared():
    src = 'a = lookup(key="book")\nb = lookup(key=["pen", "ink"][a % 2])\nc = lookup(key=["pen", "ink"][b % 2])\nresult = c\n'
    assert prepares(rewrite(src)) == [], rewrite(src)
    _, _, fake = same(src)
    assert [e[0] for e in fake.log] == ["call"] * 3, fake.log
    src = 'result = lookup(key="pen")\n'
    assert prepares(rewrite(src)) == []


def test_reads_first_in_a_block_are_not_prepared():
    src = """import contextlib
if inputs["flag"]:
    a = lookup(key="book")
else:
    a = lookup(key="pen")
v = ["pen", "ink"][a % 2]
try:
    b = lookup(key=v)
except RuntimeError:
    b = lookup(key="pen")
with contextlib.nullcontext("pen") as k:
    c = lookup(key=k)
n = 0
while n < 2:
    d = lookup(key=["pen", "ink"][n])
    n += 1
for s in inputs["symbols"]:
    e = lookup(key=["pen", "ink"][n])
    n = len(s)
result = [a, b, c, d, e]
"""
    inputs = {"flag": True, "symbols": ["A", "BB"]}
    assert prepares(rewrite(src, inputs)) == [], rewrite(src, inputs)
    _, _, fake = same(src, inputs)
    assert not fake.kinds("prepare"), fake.log


def test_prepares_hoisted_across_a_statement_are_kept():
    src = """a = echo(k="x")
b = echo(k="y")
c = echo(k=a["k"] + b["k"])
log(msg=c)
d = echo(k=c["k"])
e = echo(k=d["k"])
result = e
"""
    # echo(k="x") stays: echo(k="y")'s read is pending when it is called, and a call takes
    # any read of its exact request. echo(k=c["k"]) is hoisted across log(...); the calls
    # making c and e run right after their prepare could, with no read pending then.
    assert prepares(rewrite(src)) == [
        (['echo(k="x")', 'echo(k="y")'], "a = echo(k='x')"),
        (['echo(k=c["k"])'], "log(msg=c)"),
    ], rewrite(src)
    _, _, fake = same(src)
    # (The peeks are the chain asking the Host to wake the Guest when a, b and c arrive.)
    assert [e[0] for e in fake.log if e[0] != "peek"] == ["prepare", "prepare", "claim", "claim", "call", "prepare", "call", "claim", "call"], fake.log


def _step(args):
    """A tool that stands for the Host's wake: the chain step runs during the call."""
    plm.chain.step()
    return 0


CHAIN_TOOLS = dict(TOOLS, tick=_step)


def test_a_whole_programs_chained_read_starts_when_the_step_runs():
    # a and b are prepared first; the step (the wake) peeks their values, binds them and
    # prepares c's read before the program gets there; c's call claims it.
    src = 't = tick(n=1)\na = echo(k="x")\nb = echo(k="y")\nc = echo(k=a["k"] + "-" + b["k"])\nresult = c\n'
    response, _, fake = same(src, tools=CHAIN_TOOLS)
    assert response == {"value": {"k": "x-y"}}, response
    assert [e[:2] for e in fake.log if e[0] != "peek"] == [
        ("prepare", "echo"), ("prepare", "echo"), ("call", "tick"), ("prepare", "echo"),
        ("claim", "echo"), ("claim", "echo"), ("claim", "echo"),
    ], fake.log
    assert fake.kinds("prepare")[2][2] == {"k": "x-y"}, fake.log
    assert plm.pending == {}


def test_a_chained_read_the_program_does_not_make_is_left_unclaimed():
    # alias shares a's object: the program's c reads "z", the chain's "x". The chained
    # read is never claimed (the Host cancels it); the call is made as without it.
    src = 't = tick(n=1)\na = echo(k="x")\nb = echo(k="y")\nalias = a\nalias["k"] = "z"\nc = echo(k=a["k"] + "-" + b["k"])\nresult = c\n'
    response, _, fake = same(src, tools=CHAIN_TOOLS)
    assert response == {"value": {"k": "z-y"}}, response
    assert ("prepare", "echo", {"k": "x-y"}) in fake.log, fake.log
    assert ("call", "echo", {"k": "z-y"}) in fake.log, fake.log


def test_a_failed_read_starts_no_chain():
    # a's read fails: nothing is bound to a, and c, which needs it, is never prepared.
    src = 't = tick(n=1)\na = lookup(key="nope")\nc = lookup(key=str(a))\n'
    response, _, fake = same(src, tools=CHAIN_TOOLS)
    assert "no such key" in response["error"]["message"], response
    assert [e[2] for e in fake.kinds("prepare")] == [{"key": "nope"}], fake.log


def test_the_step_waits_while_the_table_is_in_use():
    fake = harness.use(harness.FakeSpine(TOOLS, EARLY))
    plm.chain.begin({}, [plm.rewrite._Cand(None, {"a"}, None)], {})
    plm.futures.busy = True
    try:
        plm.chain.step()
    finally:
        plm.futures.busy = False
    assert fake.log == [("peek", None, {"peek": 0})], fake.log  # wake again at the next tick
    plm.chain.reset()
    plm.chain.step()  # nothing waits: nothing asked
    assert len(fake.log) == 1, fake.log


def test_a_statement_with_several_reads_keeps_them_overlapping():
    # The second read's prepare wins; the first call could take that read (same tool, same
    # keywords: it claims by request bytes), so the first keeps its own prepare too.
    text = rewrite('x = [lookup(key="pen"), lookup(key="ink")]\nresult = x\n')
    assert prepares(text) == [(['lookup(key="pen")', 'lookup(key="ink")'], "x = [lookup(key='pen'), lookup(key='ink')]")], text
    # Another tool: the first call cannot take the second's read, and is called as is.
    text = rewrite('x = [lookup(key="pen"), market.get_price(symbol="A")]\nresult = x\n')
    assert prepares(text) == [(['market.get_price(symbol="A")'], "x = [lookup(key='pen'), market.get_price(symbol='A')]")], text
    _, _, fake = same('x = [lookup(key="pen"), market.get_price(symbol="A")]\nresult = x\n')
    assert [e[0] for e in fake.log] == ["prepare", "call", "claim"], fake.log
    # Other keyword names make other requests.
    text = rewrite('x = [echo(a="pen"), echo(b="ink")]\nresult = x\n')
    assert prepares(text) == [(['echo(b="ink")'], "x = [echo(a='pen'), echo(b='ink')]")], text


def test_work_before_the_call_keeps_the_prepare():
    for src in [
        'x = log(msg=1) + lookup(key="pen")\n',
        'x = inputs["n"] + lookup(key="pen")\n',
        'print(log(msg=1), lookup(key="pen"))\n',
        'x = {**inputs, "a": lookup(key="pen")}\n',
        'x = [*inputs["symbols"], lookup(key="pen")]\n',
        'print(**inputs["kw"], end=str(lookup(key="pen")))\n',
    ]:
        assert lead(src) == [], src
        inputs = {"n": 1, "symbols": ["A"], "kw": {"sep": "-"}}
        assert prepares(rewrite(src + "result = 1\n", inputs)) != [], src
    for src, call in [
        ('print(lookup(key="pen"))\n', 'lookup(key="pen")'),
        ('out.append(lookup(key="pen"))\n', 'lookup(key="pen")'),
        ('x = lookup(key="pen")["price"] * 2\n', 'lookup(key="pen")'),
        ('total += lookup(key="pen")\n', 'lookup(key="pen")'),
        ('x = -lookup(key="pen")\n', 'lookup(key="pen")'),
        ('x = (1, "a", y.z, [inputs], lookup(key="pen"))\n', 'lookup(key="pen")'),
        ('x = {"a": 1, "b": lookup(key="pen")}\n', 'lookup(key="pen")'),
        ('x = a if lookup(key="pen") else b\n', 'lookup(key="pen")'),
        ('if lookup(key="pen") > 1:\n    pass\n', 'lookup(key="pen")'),
        ('for x in lookup(key="pen"):\n    pass\n', 'lookup(key="pen")'),
        ('with contextlib.nullcontext(lookup(key="pen")):\n    pass\n', 'lookup(key="pen")'),
        ('x = [lookup(key="pen"), market.get_price(symbol="A")]\n', 'lookup(key="pen")'),
    ]:
        assert lead(src) == [call], (src, lead(src))
    # The second context manager's expression runs after the first one's __enter__.
    assert lead('with a, contextlib.nullcontext(lookup(key="pen")):\n    pass\n') == []
    # The body of a with statement runs after the header: its reads above it are kept.
    text = rewrite('import contextlib\nwith contextlib.nullcontext():\n    a = lookup(key="pen")\nresult = a\n')
    assert prepares(text) == [(['lookup(key="pen")'], "import contextlib")], text


def test_loops_and_comprehensions_keep_their_batches():
    src = """out = [lookup(key=k) for k in inputs["keys"]]
for k in inputs["keys"]:
    out.append(lookup(key=k))
result = out
"""
    inputs = {"keys": ["pen", "ink"]}
    keys = [k for k, _ in prepares(rewrite(src, inputs))]
    assert keys == [['[lookup(key=k) for k in inputs["keys"]]', 'for k in inputs["keys"]: lookup(key=k)']], keys
    _, _, fake = same(src, inputs)
    assert [e[0] for e in fake.log] == ["prepare"] * 4 + ["claim"] * 4, fake.log


def test_a_read_pending_in_a_loop_keeps_a_first_call_in_its_body():
    # The batch's reads are pending until the loop ends: d could take a later iteration's.
    src = """out = []
for k in inputs["keys"]:
    x = lookup(key=k)
    d = echo(k=x)
    out.append(echo(k=k))
result = out
"""
    inputs = {"keys": ["pen", "ink"]}
    keys = [k for k, _ in prepares(rewrite(src, inputs))]
    assert keys == [['for k in inputs["keys"]: lookup(key=k); echo(k=k)'], ["echo(k=x)"]], keys
    # Without a read of the same request pending, it is not prepared.
    src = src.replace("echo(k=k)", "log(k=k)")
    keys = [k for k, _ in prepares(rewrite(src, inputs))]
    assert keys == [['for k in inputs["keys"]: lookup(key=k)']], keys


def test_reads_prefix_mode_started_keep_first_calls_prepared():
    fake = harness.use(harness.FakeSpine(TOOLS, EARLY))
    src = 'a = lookup(key="pen")\nb = market.get_price(symbol="A")\n'

    def keys():
        tree = plm.transform(ast.parse(src), src, "<test>", {"lookup", "market.get_price"}, {})
        assert [type(s).__name__ for s in tree.body] == ["Expr", "Assign", "Assign"], ast.dump(tree)
        return [a.value for a in tree.body[0].value.args]

    assert keys() == ['market.get_price(symbol="A")']
    plm.reset()
    # A read prefix mode started may be pending anywhere: the first call could take it.
    assert plm.futures._offer("lookup", {"key": "x"}, spare=True) is True  # as prefix mode does
    assert keys() == ['lookup(key="pen")', 'market.get_price(symbol="A")']
    plm.reset()


def test_the_quick_look_agrees_with_the_pass():
    """plm.rewrite._nothing_to_prepare spares the pass only where the pass would insert nothing."""
    import random

    tools = {"lookup", "echo", "market.get_price"}

    def full_pass(src):
        tree = ast.parse(src)
        facts = plm.facts._Facts(tree.body, frozenset({"lookup", "echo", "get_price"}))
        usable = plm.facts._usable_tools(tools, facts.bound, facts.attrs)
        p = plm.rewrite._Pass(plm.rewrite._Scanner(usable, facts.bound, src), facts, facts.declared, plm.HELPER)
        start = plm.rewrite._module_start(tree.body)
        if start < len(tree.body):
            p.place(tree.body, start, p.block(tree.body, start))
            p.finish()
        return plm.HELPER in ast.unparse(tree)

    def quick(src):
        tree = ast.parse(src)
        facts = plm.facts._Facts(tree.body, frozenset({"lookup", "echo", "get_price"}))
        return plm.rewrite._nothing_to_prepare(tree.body, plm.rewrite._module_start(tree.body), facts)

    rng = random.Random(3)
    names = ["a", "b", "c", "d"]

    def arg():
        return rng.choice(['"x"', "1", rng.choice(names), 'inputs["k"]', rng.choice(names) + '["k"]', "len(a)", "a + b", "f(a)", "a.x"])

    def call():
        tool = rng.choice(["lookup", "echo", "market.get_price"])
        kw = rng.choice(["key", "k", "symbol"])
        return f"{tool}({kw}={arg()})" if rng.random() < 0.9 else f'{tool}("x")'

    def statement():
        v = rng.choice(names)
        return rng.choice([
            f"{v} = {call()}", f"{v} = {call()}", f"{v} = {call()}", f"{call()}", f"{v} += {call()}",
            f"{v}: int = {call()}", f"{v} = 1", f"{v} = {rng.choice(names)}", f"log(msg={v})",
            f"{v}.append(1)", f"{v}[0] = 2", f"print({call()})", f"{v} = [{call()}, {call()}]",
            f"{v} = {call()}[0]", f"{v} = [echo(k=x) for x in {rng.choice(names)}]", 'exec("")',
            f"for x in {v}:\n    {call()}", f"if {v}:\n    {v} = {call()}", f"d[{call()}] = {call()}",
            f"{v} = f({call()})", f"{v} = {call()} + {call()}", "def f(y):\n    return lookup(key=y)",
            f"import {v}", f"del {v}", f"{v} = (lambda: {call()})", f"{v}.x = {call()}",
        ])

    accepted = 0
    for _ in range(1500):
        lines = [statement() for _ in range(rng.randint(1, 6))]
        if rng.random() < 0.2:
            lines.insert(0, '"""doc"""')
        src = "\n".join(lines) + "\n"
        if quick(src):
            accepted += 1
            assert not full_pass(src), src
    assert accepted > 200, accepted
    assert quick('a = lookup(key="x")\nb = lookup(key=a)\nc = lookup(key=b)\nresult = c\n')
    assert quick('"""doc"""\nresult = market.get_price(symbol=inputs["s"])\n')
    assert not quick('a = lookup(key="x")\nb = lookup(key="y")\n')


# --- what runs ---------------------------------------------------------------


def test_reads_are_claimed_and_values_unchanged():
    src = 'log(msg=1)\na = lookup(key="book")\nb = market.get_price(symbol=inputs["s"])\nresult = [a, b]\n'
    response, _, fake = same(src, {"s": "ACME"})
    assert response == {"value": [21, {"symbol": "ACME", "price": 104}]}, response
    assert [e[0] for e in fake.log] == ["prepare", "prepare", "call", "claim", "claim"], fake.log


def test_last_expression_value():
    response, _, fake = same('x = 2\nlookup(key="book") * x')
    assert response == {"value": 42} and fake.kinds("claim"), (response, fake.log)


def test_argument_errors_stay_at_the_call_site():
    for src in [
        'x = 0\nlookup(key=1 / x)',
        'lookup(key=inputs["missing"])',
        'lookup(key=undefined_name)',
        'lookup(key="a" + 1)',
        'lookup(key={1, 2})',
        'lookup(key=float("nan"))',
        'lookup(key=[1, 2][5])',
        'lookup(key="x")',
        'lookup("book")',
    ]:
        response, _, fake = same(src)
        assert "error" in response, (src, response)
        assert not fake.kinds("prepare") or src == 'lookup(key="x")', (src, fake.log)


def test_tracebacks_are_identical():
    src = 'x = 1\ntry:\n    y = lookup(key="nope")\nfinally:\n    pass\n'
    response, _, _ = same(src)
    error = response["error"]
    assert error["line"] == 3 and "plm" not in error["traceback"] and "bootstrap" not in error["traceback"], error


def test_no_user_code_runs_early():
    src = """class Loud:
    def __eq__(self, other):
        print("eq")
        return True
    def __hash__(self):
        return hash("k")
    def __add__(self, other):
        print("add")
        return "pen"
    def __bool__(self):
        print("bool")
        return True
    def __format__(self, spec):
        print("format")
        return "pen"
    def __iter__(self):
        print("iter")
        return iter(["pen"])
    def __len__(self):
        print("len")
        return 1
    def __index__(self):
        print("index")
        return 0
class Sub(int):
    def __eq__(self, other):
        print("sub eq")
        return True
    __hash__ = int.__hash__
loud = Loud()
d = {loud: 1, "k": "pen"}
results = []
def attempt(fn):
    try:
        results.append(fn())
    except Exception as e:
        results.append(type(e).__name__)
attempt(lambda: lookup(key=loud + 1))
attempt(lambda: lookup(key=d["k"]))
attempt(lambda: lookup(key=f"{loud}"))
attempt(lambda: lookup(key=loud == 1))
attempt(lambda: lookup(key=[loud] == [1]))
attempt(lambda: lookup(key="pen" if loud else "ink"))
attempt(lambda: lookup(key=["pen"][loud]))
attempt(lambda: lookup(key=Sub(1) == 1))
attempt(lambda: lookup(key=len(loud)))
a = lookup(key=loud + 1)
b = lookup(key=d["k"])
c = lookup(key=f"{loud}")
e = lookup(key=("pen" if loud else "ink"))
f = lookup(key=["pen"][loud])
g = lookup(key=[x for x in loud][0])
h = lookup(key=str(Sub(1) == 1))
result = [results, a, b, c, e, f, g, h]
"""
    response, stdout, fake = same(src)
    assert "error" in response or response["value"][1] == 2, response  # runs the same either way
    prepared = fake.kinds("prepare")
    assert prepared == [], prepared  # nothing could be computed without user code


def test_shadowed_and_patched_builtins_are_not_called():
    src = """import builtins
real = builtins.len
def loud_len(x):
    print("user len")
    return real(x)
builtins.len = loud_len
k = "x"
a = lookup(key=["pen", "ink"][len(k)])  # prepared after k = "x", when len is the user's
builtins.len = real
str = lambda x: (print("user str"), "pen")[1]
b = lookup(key=str(1))
result = [a, b]
"""
    _, stdout, fake = same(src)  # same stdout: the user's functions ran as often with early reads
    assert "user len" in stdout and "user str" in stdout, stdout
    assert fake.kinds("prepare") == [], fake.log


def test_generators_and_user_iterables_are_not_iterated_early():
    src = """def gen():
    print("gen ran")
    yield "pen"
class It:
    def __iter__(self):
        print("iter ran")
        return iter(["ink"])
out = [lookup(key=k) for k in gen()]
for k in It():
    log(msg=k)
    out.append(lookup(key=k))
result = out
"""
    _, stdout, fake = same(src)
    assert stdout == "gen ran\niter ran\n", stdout
    # No batch over either; the for body still prepares its read when an iteration starts.
    assert fake.kinds("prepare") == [("prepare", "lookup", {"key": "ink"})], fake.log


def test_changed_arguments_are_called_normally():
    src = """d = {"k": "pen"}
log(msg=1)
d["k"] = "ink"
a = lookup(key=d["k"])
k = "pen"
def swap():
    globals()["k"] = "book"
swap()
b = lookup(key=k)
result = [a, b]
"""
    response, _, fake = same(src)
    assert response == {"value": [5, 21]}, response
    assert ("claim", "lookup", {"key": "ink"}) in fake.log or ("call", "lookup", {"key": "ink"}) in fake.log


def test_rebinding_at_run_time_calls_the_new_function():
    src = """a = lookup(key="pen")
globals()["lookup"] = lambda key: "mine:" + key
b = lookup(key="ink")
result = [a, b]
"""
    response, _, fake = same(src)
    assert response == {"value": [2, "mine:ink"]}, response


def test_tool_errors_from_futures_are_delivered():
    src = """out = []
for k in ["pen", "nope", "ink"]:
    try:
        out.append(lookup(key=k))
    except RuntimeError as e:
        out.append(str(e))
result = out
"""
    response, _, fake = same(src)
    assert response == {"value": [2, "'no such key: nope'", 5]}, response
    assert len(fake.kinds("claim")) == 3, fake.log


def test_loops_are_capped_and_the_cap_is_respected():
    src = "result = sum([lookup(key=k) for k in ['pen'] * 200])\n"
    _, _, fake = same(src)
    assert len(fake.kinds("prepare")) == plm.CAP, len(fake.kinds("prepare"))
    on, _, fake = harness.execute(src, TOOLS, EARLY, cap=3)
    assert on == {"value": 400} and len(fake.kinds("prepare")) == 3, (on, fake.log[:5])


def test_duplicate_requests_are_claimed_in_order():
    src = 'result = [lookup(key="pen"), lookup(key="pen"), lookup(key="pen")]\n'
    _, _, fake = same(src)
    assert [e[0] for e in fake.log] == ["prepare"] * 3 + ["claim"] * 3, fake.log


def test_namespace_and_builtins_after_run():
    src = """import builtins
x = lookup(key="pen")
result = [sorted(globals()), "__spine_prepare" in dir(builtins)]
"""
    response, _, _ = same(src)
    assert response["value"][1] is True, response  # a Guest builtin, early reads on or off


def test_transformed_only_when_asked():
    response, _, _ = harness.execute('lookup(key="pen")', TOOLS, EARLY)
    assert "transformed" not in response, response
    response, _, _ = harness.execute('log(msg=1)\nlookup(key="pen")', TOOLS, EARLY, transformed=True)
    assert response["transformed"].startswith("__spine_prepare('lookup(key=\"pen\")')\n"), response
    response, _, _ = harness.execute('1 +', TOOLS, EARLY, transformed=True)
    assert "transformed" not in response and response["error"]["type"] == "SyntaxError", response


def test_exit_and_exceptions_mid_way():
    for src in [
        'a = lookup(key="pen")\nexit()\nb = lookup(key="ink")',
        'a = lookup(key="pen")\nraise ValueError("stop")\nb = lookup(key="ink")',
        'print(lookup(key="pen"))\nprint(1/0)\nlookup(key="ink")',
    ]:
        same(src)


def test_evaluator_guards():
    def value(expr, env=None):
        fn = plm.purity._Compiler(set()).expr(ast.parse(expr, mode="eval").body)
        try:
            return fn((None, env or {}))
        except plm.purity._Fail:
            return "fail"

    assert value("2 ** 100000000") == "fail"
    assert value("'x' * 10 ** 9") == "fail"
    assert value("[0] * 10 ** 9") == "fail"
    assert value("1 << 10 ** 6") == "fail"
    assert value("f'{1:>100000}'") == "fail"
    assert value("'ab'.center(10 ** 9)") == "fail"
    assert value("'ab'.replace('', 'x' * 1000000)") == "fail"
    assert value("2 ** 10") == 1024
    assert value("f'{x!r}-{y:.2f}'", {"x": "a", "y": 1.5}) == "'a'-1.50"
    assert value("x.get('a', 0) + len(x)", {"x": {"a": 1}}) == 2
    assert value("sorted(x)[0]", {"x": [3, 1, 2]}) == 1
    assert value("x['a']", {"x": {("t",): 1, "a": 2}}) == "fail"  # a key that is not a scalar
    assert value("1 if x else 2", {"x": object()}) == "fail"
    assert value("x == y", {"x": [1], "y": [object()]}) == "fail"
    for not_pure in ["x.attr", "f(x)", "x()", "[a for a in b]", "lambda: 1", "(y := 1)", "x.append(1)", "b'x'", "'%s' % x"]:
        try:
            plm.purity._Compiler(set()).expr(ast.parse(not_pure, mode="eval").body)
        except plm.purity._NotPure:
            continue
        except Exception:
            continue
        if not_pure != "'%s' % x":
            raise AssertionError(f"{not_pure} compiled")


def test_prepare_never_raises():
    harness.use(harness.FakeSpine(TOOLS, EARLY))
    assert plm.prepare("lookup", lambda: 1 / 0) is False
    assert plm.prepare("lookup", lambda: {"key": object()}) is False
    assert plm.prepare("lookup", lambda: {"key": "x" * (2 << 20)}) is False
    assert plm.prepare("lookup", lambda: {"key": "pen"}) is True
    # Pending reads are found by their request's hash: the Host keeps the bytes.
    assert list(plm.pending) == [hash(b'{"tool":"lookup","args":{"key":"pen"}}')]
    assert bootstrap.invoke_tool("lookup", {"key": "pen"}) == 2
    assert plm.pending == {}


# --- the program cannot reach the machinery -----------------------------------


def test_prepare_statements_ignore_a_shadowing_global():
    # The prepare statements call the helper as a constant of the code: a binding of
    # its name in globals() (spelled so that the pass still runs) is never called.
    source = (
        'g = globals()\ng["__spine_" + "prepare"] = lambda *a: print("shadowed", a)\n'
        'k = "pen"\nlog(n=1)\na = lookup(key=k)\nresult = a'
    )
    response, out, fake = same(source)
    assert out == "" and response["value"] == 2
    assert ("prepare", "lookup", {"key": "pen"}) in fake.log and ("claim", "lookup", {"key": "pen"}) in fake.log


def test_prepare_statements_in_a_module_with_many_constants():
    # More than 256 constants: the helper's index needs an EXTENDED_ARG.
    consts = "".join(f"c{i} = {i}.5\n" for i in range(300))
    source = consts + 'k = "ink"\nlog(n=1)\nresult = [lookup(key=k), c299]'
    response, out, fake = same(source)
    assert response["value"] == [5, 299.5]
    assert ("claim", "lookup", {"key": "ink"}) in fake.log


def test_prepare_statements_in_a_module_with_many_names():
    # More than 256 names: the helper's name is loaded with an EXTENDED_ARG.
    names = "".join(f"n{i} = {i}\n" for i in range(300))
    source = names + 'k = "ink"\nlog(n=1)\nresult = [lookup(key=k), n299]'
    response, out, fake = same(source)
    assert response["value"] == [5, 299]
    assert ("claim", "lookup", {"key": "ink"}) in fake.log


def test_the_pass_leaves_the_tree_untouched_when_it_fails():
    import plm.rewrite as rewrite

    source = 'k = "pen"\nlog(n=1)\na = lookup(key=k)\n'
    tree = compile(source, "<t>", "exec", ast.PyCF_ONLY_AST)
    before = ast.dump(tree)
    real = rewrite._Pass.prepare_stmt

    def boom(self, cands, at):
        raise RecursionError

    rewrite._Pass.prepare_stmt = boom
    try:
        assert rewrite.transform(tree, source, "<t>", {"lookup"}, {}) is tree
    finally:
        rewrite._Pass.prepare_stmt = real
        plm.reset()
    assert ast.dump(tree) == before


def test_type_checks_never_hash_a_type():
    # type(x) in {...} would run a metaclass's __hash__; the checks compare ids.
    from plm import purity

    ran = []

    class Meta(type):
        def __hash__(cls):
            ran.append("hash")
            return 1

        def __eq__(cls, other):
            ran.append("eq")
            return False

    class Odd(metaclass=Meta):
        pass

    value = Odd()
    assert purity._plain({"a": [1, value]}) is False
    assert purity._plain({"a": [1, {"b": value}]}, True) is False
    for fn in (purity._f_len, purity._f_str, purity._f_abs, purity._truth):
        try:
            fn(value)
        except purity._Fail:
            pass
    assert ran == []


def test_names_are_not_looked_up_in_a_namespace_with_a_planted_key():
    from plm import purity

    ran = []

    class Key:
        def __hash__(self):
            return hash("k")

        def __eq__(self, other):
            ran.append("eq")
            return False

    compiler = purity._Compiler(set())
    load = compiler.expr(ast.parse("k", mode="eval").body)
    call = compiler.expr(ast.parse("len(k)", mode="eval").body)
    ns = {Key(): 1, "k": "pen"}
    del ran[:]  # building ns compared the keys
    for fn in (load, call):
        purity._key_cache.clear()
        try:
            fn((None, ns))
            raise AssertionError("computed from a namespace with a planted key")
        except purity._Fail:
            pass
    purity._key_cache.clear()
    assert ran == []
    assert call((None, {"k": "pen"})) == 3


if __name__ == "__main__":  # natively, and in the Guest (where the program is __main__)
    harness.main(globals())
