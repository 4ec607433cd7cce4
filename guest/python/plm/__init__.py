"""Early reads in the Guest: the PLM pass and prefix mode (docs/early-reads.md).

A tool the Host marked AllowEarlyRead may be started before the program reaches its
call. This package decides where, and keeps the Guest's side of the futures. Its modules,
by job (each imports only those listed after it; the graph is drawn in bootstrap.py):

- ``plm.prefix``: prefix mode, reading the program while it streams in and preparing the
  calls whose arguments are known from constants and ``inputs``;
- ``plm.rewrite``: the PLM pass (prepare -> linearize -> materialize), ``transform``,
  which inserts statements ``__spine_prepare("<key>", ...)`` into the program's AST, and
  ``run_plans``, the helper those statements call;
- ``plm.chain``: chained reads, which start once the values they need have arrived
  (``step``, run between two bytecodes when the Host wakes the Guest);
- ``plm.facts``: what each statement of a program may bind or change;
- ``plm.futures``: the table of pending reads and ``send``, which every tool call goes
  through (a call claims a read prepared for exactly its request's bytes);
- ``plm.purity``: the plain-data checks and the evaluator of pure expressions, which
  runs no code of the program and never raises into it;
- ``plm.wire``: a tool request's bytes.

This module holds what spans them: ``reset`` (the state of a run that has ended) and
``warm`` (the image's warm-up), and the names bootstrap uses.

Nothing here may change what a program observes: the helpers catch everything,
evaluate only exact built-in data types, and bound the work they do.
"""

import ast
from builtins import (
    compile,
    len,
    list,
    range,
)

from plm import chain, futures, prefix, purity, rewrite, wire
from plm.futures import pending, prepare, send, settle, start
from plm.prefix import _Prefix, prefix_begin, prefix_feed
from plm.rewrite import CAP, HELPER, _plans, materialize, run_plans, transform

__all__ = [
    "pending", "send", "prepare", "transform", "materialize", "run_plans", "reset", "prefix_begin", "prefix_feed", "warm",
    "CAP", "HELPER", "start", "settle", "chain_step",
]

chain_step = chain.step


def reset():
    """Forget every handle and plan: the state of a run that has ended."""
    chain.reset()  # first: a chain step between two of these must find nothing to do
    futures.reset()
    rewrite.reset()
    purity._key_cache.clear()
    prefix.reset()


# Warming up ----------------------------------------------------------------

_WARM_SOURCE = '''"""Takes the pass, the evaluator and the prefix reader down their main paths."""
k = inputs["k"]
a = lookup(key=k)
b = lookup(key=f"{k}-{inputs['n'] * 2 + 1}")
for s in inputs["symbols"]:
    market.get_price(symbol=s.lower(), days=[1, 2][0])
prices = {s: market.get_price(symbol=s) for s, n in zip(inputs["symbols"], range(3)) if s != "B"}
try:
    c = lookup(key=inputs.get("other", "x") + "!")
except RuntimeError as e:
    c = lookup(key=str(len(inputs["symbols"])))
if a and inputs["n"] > 1 or not b:
    d = [lookup(key=x) for x in sorted(inputs["symbols"])[:2]]
n = 0
while n < 2:
    n += 1
    e = lookup(key=inputs["symbols"][n] if n else "z")
with open("x") as f:
    print(lookup(key=("a", 1)), f)
result = [a, b, c, d]
'''


_WARM_CHAIN = 'a = lookup(key=inputs["k"])\nb = lookup(key=a)\nc = market.get_price(symbol=b)\nresult = c\n'


class _NoHost:
    """Stands in for _spine while warming up: every prepare is accepted, nothing is sent."""

    @staticmethod
    def prepare(request):
        return 1

    @staticmethod
    def peek(handle):
        return None

    call = resolve = None


def warm(rounds=8):
    """Run the pass, the evaluator and the prefix reader on a sample program without a Host.

    CPython 3.11 specializes code the first times it runs; in a Guest image captured after
    this, runs with early reads do not pay for that (about half a millisecond each). Safe to
    call at any time outside a run; leaves nothing behind."""
    real = futures._spine
    futures._spine = _NoHost
    checked = dict(wire.keywords)  # the sample's calls are not the Host's tools'
    wire.keywords.clear()
    inputs = {"k": "pen", "n": 3, "symbols": ["A", "B", "C"], "other": "y"}
    tools = [{"name": "lookup", "early": True}, {"name": "market.get_price", "early": True}]
    early = {"lookup", "market.get_price"}
    try:
        for _ in range(rounds):
            tree = compile(_WARM_SOURCE, "<warm>", "exec", ast.PyCF_ONLY_AST, dont_inherit=True)
            transform(tree, _WARM_SOURCE, "<warm>", early, {"inputs": inputs})
            run_plans(*list(_plans))
            reset()
            tree = compile(_WARM_CHAIN, "<warm>", "exec", ast.PyCF_ONLY_AST, dont_inherit=True)
            transform(tree, _WARM_CHAIN, "<warm>", early, {"inputs": inputs})  # the quick look
            reset()
            # Prefix mode, then the pass over the whole program with its reads pending.
            reader = _Prefix(inputs, tools)
            data = _WARM_SOURCE.encode()
            for at in range(0, len(data), 40):
                reader.feed(data[at : at + 40])
            tree = compile(_WARM_SOURCE, "<warm>", "exec", ast.PyCF_ONLY_AST, dont_inherit=True)
            transform(tree, _WARM_SOURCE, "<warm>", early, {"inputs": inputs})
            run_plans(*list(_plans))
            reset()
    finally:
        futures._spine = real
        wire.keywords.update(checked)
        reset()
