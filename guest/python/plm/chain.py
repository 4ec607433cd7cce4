"""Chained early reads: a read whose arguments need the value of another read starts as
soon as that value arrives, before the program has it (docs/early-reads.md, "Chained
reads").

A *spec* is a read started for a statement ``name = tool(...)`` (one target, a name): if
the program reaches that statement unchanged, the read's value is the value ``name`` gets.
A *waiting* candidate is a call whose arguments read only such names, ``inputs`` and
constants. ``advance`` asks the Host after each spec a waiting candidate needs
(``_spine.peek``, which hands a finished read's response over without claiming it), binds
the values that arrived (speculatively: the program has not run), and prepares the
candidates whose names are all bound, with the evaluator of ``plm.purity``. A chained read
is a read like any other: the program claims it only with a call of the same request bytes.

Prefix mode (``plm.prefix``) advances its chains at each chunk. For a whole program the
pass (``plm.rewrite``) finds the chains (``begin``), and ``step`` advances them between two
bytecodes of the running program: the Host's tick calls the Guest's ``wake`` once a read a
chain asked after has finished, and ``wake`` schedules ``step`` as a pending call, run in a
window where no code of the program runs (``guest/c/spine.c``). Nothing here raises into
the program, prints, or runs the program's code.
"""

import ast
from builtins import (
    Exception,
    dict,
    id,
    len,
    list,
    range,
    set,
    type,
)
from json import decoder as _decoder
from json import scanner as _scanner

from plm import futures
from plm.purity import _key_cache

__all__ = ["advance", "begin", "peek", "reset", "spec", "spec_target", "step"]

ROUNDS = 8  # advances one step makes while its own prepares start specs

# The response decoder, made once: the json module's own functions and globals are the
# program's to change (json.loads, json._default_decoder), this scanner is not.
_scan = _scanner.make_scanner(_decoder.JSONDecoder())

_GONE = (False, None)


def peek(handle):
    """The early read handle: (True, value) once it has finished with a value, (False,
    None) when it failed or is no more (claimed, cancelled), None while it runs (the Host
    then wakes the Guest when it finishes)."""
    raw = futures._spine.peek(handle)
    if raw is None:
        return None
    if raw is False:
        return _GONE
    envelope, _ = _scan(raw.decode("utf-8"), 0)
    if type(envelope) is dict and "value" in envelope and envelope.get("error") is None:
        return (True, envelope["value"])
    return _GONE


def advance(specs, known, waiting, run, gone=None):
    """Bind the names of the specs (name -> handle) whose values have arrived into known,
    and run(cand) for each waiting candidate whose names are all known now. Returns the
    candidates still waiting: those whose names are known or specs; with gone (a set),
    also those that need a name not yet a spec, and the names of failed specs go to gone
    and drop the candidates that need them."""
    for name, handle in list(specs.items()):
        got = peek(handle)
        if got is None:
            continue
        del specs[name]
        if got[0]:
            known[name] = got[1]
        elif gone is not None:
            gone.add(name)
    still = []
    for cand in waiting:
        free = cand.free
        if free <= known.keys():
            run(cand)
        elif gone is None:
            if free <= known.keys() | specs.keys():
                still.append(cand)
        elif not free & gone:
            still.append(cand)
    return still


# A whole program's chains, between begin and reset --------------------------

_specs = {}  # name -> handle of the spec read started for it
_known = {}  # "inputs" -> the run's inputs; name -> the value its spec read arrived with
_gone = set()  # names whose spec read failed or was claimed before its value was seen
_waiting = []  # the candidates waiting for specs
_targets = {}  # id(candidate) -> the name its statement assigns, for a candidate that is a spec itself
_watch = set()  # names some waiting candidate reads
_fresh = False  # spec started a read since the step's last advance


def reset():
    """Forget the chains: the state of a run that has ended."""
    global _waiting
    _specs.clear()
    _known.clear()
    _gone.clear()
    _waiting = []
    _targets.clear()
    _watch.clear()


def begin(inputs, waiting, targets):
    """The pass found chains: waiting candidates (reading only spec names, inputs and
    constants), and targets (id(candidate) -> name for the candidates that are specs)."""
    global _waiting
    _known["inputs"] = inputs
    _waiting = waiting
    _targets.update(targets)
    for cand in waiting:
        _watch.update(cand.free)


def spec(name, handle):
    """The plan of the statement ``name = tool(...)`` started its read: ask the Host to
    wake the Guest when it finishes, if a chain waits for it."""
    global _fresh
    if name in _watch and name not in _known:
        _specs[name] = handle
        _fresh = True
        futures._spine.peek(handle)  # outside a window: only asks for the wake


def step():
    """Advance the whole program's chains: the pending call wake schedules. Never raises
    (a KeyboardInterrupt from the Host is deferred by the C side)."""
    global _waiting, _fresh
    if not _waiting:
        return
    if futures.busy:
        futures._spine.peek(0)  # the table is in use: wake again at the next tick
        return
    futures.busy = True
    try:
        for _ in range(ROUNDS):
            _fresh = False
            _key_cache.clear()
            _waiting = advance(_specs, _known, _waiting, _run, _gone)
            if not _fresh or not _waiting:
                break
        _forget()
    except Exception:
        _specs.clear()
        _waiting = []
    finally:
        _key_cache.clear()
        futures.busy = False


def _forget():
    """Drop the values no waiting candidate reads any more: the memory is the program's."""
    needed = set()
    for cand in _waiting:
        needed |= cand.free
    for name in list(_known):
        if name != "inputs" and name not in needed:
            del _known[name]


def _run(cand):
    futures.last_handle = 0
    try:
        ok = cand.plan((None, _known), futures.CHAIN)
    except Exception:
        return
    name = _targets.get(id(cand))
    if ok is True and name is not None and futures.last_handle:
        spec(name, futures.last_handle)


def spec_target(stmt):
    """name for a statement ``name = call(...)``, else None: the form whose read gives name
    its value if the program reaches the statement unchanged."""
    if type(stmt) is ast.Assign and len(stmt.targets) == 1 and type(stmt.value) is ast.Call:
        target = stmt.targets[0]
        if type(target) is ast.Name:
            return target.id
    return None
