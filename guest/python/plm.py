"""Early reads in the Guest: the PLM pass and prefix mode (docs/early-reads.md).

A tool the Host marked AllowEarlyRead may be started before the program reaches
its call. This module decides where, and keeps the Guest's side of the futures:

- ``pending`` maps the bytes of a prepared request to its handles, oldest first.
  Every call of a tool goes through ``send``: when a handle waits for exactly
  those bytes, the call claims it (``_spine.resolve``), otherwise it is a normal
  call. Call sites are never rewritten, so a call evaluates its arguments, raises
  and shows in tracebacks exactly as without early reads.
- ``transform`` (PLM: prepare -> linearize -> materialize) inserts statements
  ``__spine_prepare("<key>", ...)`` into the program's AST at the earliest point
  where the arguments of an early-read call can be computed. ``run_plans`` (the
  helper: a builtin of every Guest, early reads on or off, so no program can tell
  the difference) computes those arguments with a small evaluator of pure
  expressions that runs no user code and never raises, and prepares the requests.
- ``prefix_begin`` / ``prefix_feed`` read the program while it streams in and
  prepare the calls whose arguments are known from constants and ``inputs``;
  ``execute`` then runs the whole program with PLM on, and PLM adopts those
  futures instead of preparing them again.

Nothing here may change what a program observes: the helpers catch everything,
evaluate only exact built-in data types, and bound the work they do.
"""

import ast
import builtins as _builtins_module
import re
from builtins import (
    BaseException,
    Exception,
    RecursionError,
    SyntaxError,
    UnicodeDecodeError,
    ValueError,
    abs,
    any,
    ascii,
    bool,
    bytearray,
    bytes,
    compile,
    dict,
    enumerate,
    float,
    format,
    frozenset,
    getattr,
    id,
    int,
    isinstance,
    iter,
    len,
    list,
    max,
    min,
    range,
    repr,
    reversed,
    round,
    set,
    sorted,
    str,
    sum,
    tuple,
    type,
    zip,
)

import _spine
import bootstrap

__all__ = [
    "pending", "send", "prepare", "transform", "run_plans", "reset", "prefix_begin", "prefix_feed", "warm",
]

CAP = 64  # requests one loop or comprehension prepares at its entry
MAX_LEN = 1 << 20  # longest str, list or tuple an argument evaluation may build
MAX_BITS = 1 << 16  # largest int, in bits, an argument evaluation may compute with
MAX_SORT = 1 << 16  # most elements min/max/sum/sorted/join may look at
MAX_SCAN = 4096  # largest dict or set whose keys a lookup checks
MAX_NODES = 1 << 17  # values a plain-data check may visit
MAX_VISITS = 1024  # elements one loop or comprehension entry may look at
MAX_MESSAGE = 1 << 20  # maxMessage: the Host refuses larger requests
MAX_STATEMENT = 64 << 10  # prefix mode gives up on a statement longer than this
HELPER = "__spine_prepare"

pending = {}  # request bytes -> [handle, ...], oldest first
_spare = {}  # request bytes -> how many of pending[request] prefix mode made and no plan adopted yet
_spare_calls = set()  # (tool, keyword names) of every read prefix mode made in this run
_plans = {}  # plan key -> plan, for run_plans
_ns = None  # the running program's namespace
_prefix = None  # the prefix reader of the run, between prefix_begin and execute
_key_cache = {}  # id(dict or set) -> (object, its keys are scalars), for one batch of prepares

_bdict = _builtins_module.__dict__


def reset():
    """Forget every handle and plan: the state of a run that has ended."""
    global _ns, _prefix
    pending.clear()
    _spare.clear()
    _spare_calls.clear()
    _plans.clear()
    _key_cache.clear()
    _ns = _prefix = None


# ---------------------------------------------------------------------------
# The Guest's futures.


def send(request):
    """Send one encoded tool request: claim a prepared read of exactly these bytes, or call."""
    handles = pending.get(request) if pending else None
    if handles:
        handle = handles.pop(0)
        if handles:
            spare = _spare.get(request)
            if spare is not None and spare > len(handles):
                _spare[request] = len(handles)
        else:
            del pending[request]
            _spare.pop(request, None)
        return _spine.resolve(handle, request)
    return _spine.call(request)


def _offer(tool, args, spare=False):
    """Prepare the call of tool with args. True: a read is pending for it; False: the Host
    said no (stop preparing for now); None: args are not plain data."""
    if type(args) is not dict or not _plain(args):
        return None
    request = bootstrap._encode_request(tool, args)
    if len(request) > MAX_MESSAGE:
        return None
    if not spare:
        adoptable = _spare.get(request)
        if adoptable:
            # Prefix mode prepared it already: this plan takes that read over.
            if adoptable > 1:
                _spare[request] = adoptable - 1
            else:
                del _spare[request]
            return True
    handle = _spine.prepare(request)
    if not handle:
        return False
    handles = pending.get(request)
    if handles is None:
        pending[request] = [handle]
    else:
        handles.append(handle)
    if spare:
        _spare[request] = _spare.get(request, 0) + 1
        _spare_calls.add((tool, tuple(args)))
    return True


def prepare(tool, thunk):
    """Prepare the call of tool with the arguments thunk() returns (a dict).

    Evaluating the arguments early never raises into the program: any failure just
    means no prepare. Returns True when a read is pending for the request."""
    try:
        _key_cache.clear()
        return _offer(tool, thunk()) is True
    except BaseException:
        return False


def _offer_call(tool, names, fns, env, spare=False):
    try:
        args = {}
        for name, fn in zip(names, fns):
            args[name] = fn(env)
        return _offer(tool, args, spare)
    except Exception:
        return None


def run_plans(*keys):
    """The helper the rewritten program calls: run the plans named by keys, in order.
    Anything else (no plans, unknown keys, a program calling it itself) does nothing."""
    try:
        _key_cache.clear()
        ns = _ns
        for key in keys:
            if _plans[key]((None, ns)) is False:
                break
    except BaseException:
        pass
    finally:
        _key_cache.clear()


# ---------------------------------------------------------------------------
# Plain data: values whose comparison, hashing and encoding run no user code.

_NONE = type(None)
_SCALAR = frozenset((int, float, str, bool, _NONE))
_NUMBER = frozenset((int, float, bool))
_INT = frozenset((int, bool))
_SEQ = frozenset((str, list, tuple))
_INDEXABLE = frozenset((str, list, tuple, range))
_KEYS, _VALUES, _ITEMS = type({}.keys()), type({}.values()), type({}.items())
_SIZED = frozenset((str, list, tuple, dict, set, frozenset, range, _KEYS, _VALUES, _ITEMS))
_TRUTHY = _SCALAR | _SIZED


class _Fail(Exception):
    """An argument cannot be computed early (never leaves this module)."""


class _NotPure(Exception):
    """An expression is not one the evaluator can compute (found by the pass)."""


class _Lazy:
    """An iterator over checked data (enumerate, zip), made only by the evaluator."""

    __slots__ = ("make",)

    def __init__(self, make):
        self.make = make


def _plain(value, sets=False):
    """Whether value is exact JSON data all the way down (with sets: sets too), dict
    keys scalars, within MAX_NODES values."""
    budget = MAX_NODES
    stack = [value]
    pop, push = stack.pop, stack.extend
    while stack:
        x = pop()
        t = type(x)
        if t in _SCALAR:
            continue
        if t is list or t is tuple:
            budget -= len(x) + 1
            if budget < 0:
                return False
            push(x)
        elif t is dict:
            budget -= 2 * len(x) + 1
            if budget < 0:
                return False
            for k in x:
                if type(k) not in _SCALAR:
                    return False
            push(x.values())
        elif sets and (t is set or t is frozenset):
            budget -= len(x) + 1
            if budget < 0:
                return False
            for k in x:
                if type(k) not in _SCALAR:
                    return False
        else:
            return False
    return True


def _keys_scalar(container):
    """Whether every key of a dict (or element of a set) is an exact scalar, so a lookup
    in it compares only built-in values."""
    hit = _key_cache.get(id(container))
    if hit is not None and hit[0] is container:
        return hit[1]
    ok = len(container) <= MAX_SCAN
    if ok:
        for k in container:
            if type(k) not in _SCALAR:
                ok = False
                break
    _key_cache[id(container)] = (container, ok)
    return ok


def _truth(v):
    if type(v) not in _TRUTHY:
        raise _Fail
    return bool(v)


def _small(x):
    if type(x) is int and x.bit_length() > MAX_BITS:
        raise _Fail
    return x


def _sized(x, limit=MAX_LEN):
    if type(x) not in _SIZED or len(x) > limit:
        raise _Fail
    return x


def _iter_of(x):
    t = type(x)
    if t in _SIZED:
        return iter(x)
    if t is _Lazy:
        return x.make()
    raise _Fail


# Operators -----------------------------------------------------------------


def _numbers(a, b):
    if type(a) not in _NUMBER or type(b) not in _NUMBER:
        raise _Fail
    _small(a)
    _small(b)


def _add(a, b):
    ta = type(a)
    if ta in _NUMBER and type(b) in _NUMBER:
        return _small(a) + _small(b)
    if ta is type(b) and ta in _SEQ:
        if len(a) + len(b) > MAX_LEN:
            raise _Fail
        return a + b
    raise _Fail


def _sub(a, b):
    _numbers(a, b)
    return a - b


def _mul(a, b):
    ta, tb = type(a), type(b)
    if ta in _NUMBER and tb in _NUMBER:
        if ta is int and tb is int and a.bit_length() + b.bit_length() > MAX_BITS:
            raise _Fail
        return _small(a) * _small(b)
    if ta in _SEQ and tb in _INT:
        seq, n = a, b
    elif tb in _SEQ and ta in _INT:
        seq, n = b, a
    else:
        raise _Fail
    if n > 0 and len(seq) * n > MAX_LEN:
        raise _Fail
    return a * b


def _div(a, b):
    _numbers(a, b)
    return a / b


def _floordiv(a, b):
    _numbers(a, b)
    return a // b


def _mod(a, b):
    _numbers(a, b)
    return a % b


def _pow(a, b):
    _numbers(a, b)
    if type(a) in _INT and type(b) in _INT and b > 0 and max(abs(a).bit_length(), 1) * b > MAX_BITS:
        raise _Fail
    return a ** b


def _ints(a, b):
    if type(a) not in _INT or type(b) not in _INT:
        raise _Fail
    _small(a)
    _small(b)


def _lshift(a, b):
    _ints(a, b)
    if b > MAX_BITS or a.bit_length() + b > MAX_BITS:
        raise _Fail
    return a << b


def _rshift(a, b):
    _ints(a, b)
    return a >> b


def _bitand(a, b):
    _ints(a, b)
    return a & b


def _bitor(a, b):
    _ints(a, b)
    return a | b


def _bitxor(a, b):
    _ints(a, b)
    return a ^ b


_BINOPS = {
    ast.Add: _add,
    ast.Sub: _sub,
    ast.Mult: _mul,
    ast.Div: _div,
    ast.FloorDiv: _floordiv,
    ast.Mod: _mod,
    ast.Pow: _pow,
    ast.LShift: _lshift,
    ast.RShift: _rshift,
    ast.BitAnd: _bitand,
    ast.BitOr: _bitor,
    ast.BitXor: _bitxor,
}


def _neg(a):
    if type(a) not in _NUMBER:
        raise _Fail
    return -a


def _pos(a):
    if type(a) not in _NUMBER:
        raise _Fail
    return +a


def _invert(a):
    if type(a) not in _INT:
        raise _Fail
    return ~a


def _not(a):
    return not _truth(a)


_UNARYOPS = {ast.USub: _neg, ast.UAdd: _pos, ast.Invert: _invert, ast.Not: _not}


def _comparable(a, b):
    if not _plain(a, True) or not _plain(b, True):
        raise _Fail


def _eq(a, b):
    _comparable(a, b)
    return a == b


def _ne(a, b):
    _comparable(a, b)
    return a != b


def _lt(a, b):
    _comparable(a, b)
    return a < b


def _le(a, b):
    _comparable(a, b)
    return a <= b


def _gt(a, b):
    _comparable(a, b)
    return a > b


def _ge(a, b):
    _comparable(a, b)
    return a >= b


def _in(a, b):
    tb = type(b)
    if tb is str:
        if type(a) is str:
            return a in b
    elif tb is dict or tb is set or tb is frozenset:
        if type(a) in _SCALAR and _keys_scalar(b):
            return a in b
    elif tb is list or tb is tuple:
        _comparable(a, b)
        return a in b
    elif tb is range:
        if type(a) in _INT:
            return a in b
    raise _Fail


def _not_in(a, b):
    return not _in(a, b)


def _is(a, b):
    return a is b


def _is_not(a, b):
    return a is not b


_CMPOPS = {
    ast.Eq: _eq,
    ast.NotEq: _ne,
    ast.Lt: _lt,
    ast.LtE: _le,
    ast.Gt: _gt,
    ast.GtE: _ge,
    ast.In: _in,
    ast.NotIn: _not_in,
    ast.Is: _is,
    ast.IsNot: _is_not,
}


def _item(v, k):
    t = type(v)
    if t is dict:
        if type(k) in _SCALAR and _keys_scalar(v):
            return v[k]
    elif t in _INDEXABLE:
        if type(k) in _INT:
            return v[k]
    raise _Fail


def _slice(v, lo, hi, step):
    if type(v) not in _INDEXABLE:
        raise _Fail
    for b in (lo, hi, step):
        if b is not None and type(b) not in _INT:
            raise _Fail
    return v[lo:hi:step]


def _fmt(v, conversion, spec):
    if type(v) not in _SCALAR or type(spec) is not str:
        raise _Fail
    if conversion == 115:
        v = str(v)
    elif conversion == 114:
        v = repr(v)
    elif conversion == 97:
        v = ascii(v)
    if spec:
        # No width or precision that would build a huge string.
        digits = 0
        for ch in spec:
            if "0" <= ch <= "9":
                digits += 1
                if digits > 4:
                    raise _Fail
            else:
                digits = 0
    return format(v, spec)


# Built-in functions and methods the evaluator may call --------------------


def _elements(x):
    """The elements of an exact built-in collection, as a checked list."""
    if type(x) not in _SIZED or len(x) > MAX_SORT:
        raise _Fail
    items = list(x)
    if not _plain(items, True):
        raise _Fail
    return items


def _f_len(x):
    if type(x) not in _SIZED:
        raise _Fail
    return len(x)


def _f_str(x=""):
    if type(x) not in _SCALAR:
        raise _Fail
    return str(x)


def _f_int(x=0):
    t = type(x)
    if t in _NUMBER or (t is str and len(x) <= 1000):
        return int(x)
    raise _Fail


def _f_float(x=0.0):
    t = type(x)
    if t in _NUMBER or (t is str and len(x) <= 1000):
        return float(x)
    raise _Fail


def _f_bool(x=False):
    return _truth(x)


def _f_abs(x):
    if type(x) not in _NUMBER:
        raise _Fail
    return abs(x)


def _f_round(x, n=None):
    if type(x) not in _NUMBER or (n is not None and type(n) not in _INT):
        raise _Fail
    return round(x, _small(n)) if n is not None else round(x)


def _f_min(*args):
    return min(_elements(args[0]) if len(args) == 1 else _elements(args))


def _f_max(*args):
    return max(_elements(args[0]) if len(args) == 1 else _elements(args))


def _f_sum(x, start=0):
    items = _elements(x)
    for v in items:
        _small(v)
        if type(v) not in _NUMBER:
            raise _Fail
    if type(start) not in _NUMBER:
        raise _Fail
    return sum(items, start)


def _f_sorted(x, reverse=False):
    if type(reverse) not in _INT:
        raise _Fail
    return sorted(_elements(x), reverse=reverse)


def _f_list(x=()):
    return list(_sized(x))


def _f_tuple(x=()):
    return tuple(_sized(x))


def _f_range(*args):
    for a in args:
        if type(a) not in _INT:
            raise _Fail
    return range(*args)


def _f_enumerate(x, start=0):
    _sized(x, 1 << 62)
    if type(start) not in _INT:
        raise _Fail
    return _Lazy(lambda: enumerate(x, start))


def _f_zip(*xs):
    for x in xs:
        _sized(x, 1 << 62)
    return _Lazy(lambda: zip(*xs))


# name -> (function, fewest positional arguments, most, keyword arguments allowed)
_FUNCS = {
    "len": (_f_len, 1, 1, ()),
    "str": (_f_str, 0, 1, ()),
    "int": (_f_int, 0, 1, ()),
    "float": (_f_float, 0, 1, ()),
    "bool": (_f_bool, 0, 1, ()),
    "abs": (_f_abs, 1, 1, ()),
    "round": (_f_round, 1, 2, ()),
    "min": (_f_min, 1, 8, ()),
    "max": (_f_max, 1, 8, ()),
    "sum": (_f_sum, 1, 2, ()),
    "sorted": (_f_sorted, 1, 1, ("reverse",)),
    "list": (_f_list, 0, 1, ()),
    "tuple": (_f_tuple, 0, 1, ()),
    "range": (_f_range, 1, 3, ()),
    "enumerate": (_f_enumerate, 1, 2, ("start",)),
    "zip": (_f_zip, 1, 8, ()),
}
_ORIGINAL = {name: _bdict[name] for name in _FUNCS}


def _str_args(*args):
    for a in args:
        t = type(a)
        if t is tuple:
            for s in a:
                if type(s) is not str:
                    raise _Fail
        elif t not in _SCALAR:
            raise _Fail


def _plain_method(method):
    def call(s, *args):
        _str_args(*args)
        return method(s, *args)

    return call


def _m_join(sep, items):
    items = _elements(items)
    total = len(sep) * len(items)
    for s in items:
        if type(s) is not str:
            raise _Fail
        total += len(s)
    if total > MAX_LEN:
        raise _Fail
    return sep.join(items)


def _m_replace(s, old, new, count=-1):
    if type(old) is not str or type(new) is not str or type(count) not in _INT:
        raise _Fail
    n = s.count(old)
    if 0 <= count < n:
        n = count
    if len(s) + n * (len(new) - len(old)) > MAX_LEN:
        raise _Fail
    return s.replace(old, new, count)


def _padding(method):
    def call(s, width, *fill):
        _str_args(*fill)
        if type(width) not in _INT or width > MAX_LEN:
            raise _Fail
        return method(s, width, *fill)

    return call


_STR_METHODS = {
    name: _plain_method(getattr(str, name))
    for name in (
        "lower upper strip lstrip rstrip title capitalize casefold swapcase split rsplit splitlines "
        "partition rpartition startswith endswith find rfind count isdigit isalpha isalnum isspace "
        "islower isupper isnumeric isdecimal removeprefix removesuffix"
    ).split()
}
_STR_METHODS["join"] = _m_join
_STR_METHODS["replace"] = _m_replace
for _name in ("center", "ljust", "rjust", "zfill"):
    _STR_METHODS[_name] = _padding(getattr(str, _name))
del _name


def _m_get(d, key, default=None):
    if type(key) not in _SCALAR or not _keys_scalar(d):
        raise _Fail
    return d.get(key, default)


_DICT_METHODS = {"get": _m_get, "keys": dict.keys, "values": dict.values, "items": dict.items}
_METHOD_ARITY = {"get": (1, 2), "keys": (0, 0), "values": (0, 0), "items": (0, 0)}


# The evaluator: pure expressions compiled to closures of env --------------
#
# env is (overlay, ns): overlay holds loop and comprehension variables (or None),
# ns the names of the program (its namespace, or prefix mode's known values).


class _Compiler:
    """Compiles a pure expression into a function of env, recording the names it reads.
    Raises _NotPure for anything that could run user code."""

    def __init__(self, shadowed):
        self.shadowed = shadowed  # names the program binds: no built-in function under them
        self.free = set()

    def expr(self, node):
        method = _COMPILE.get(type(node))
        if method is None:
            raise _NotPure
        return method(self, node)

    def optional(self, node):
        return None if node is None else self.expr(node)

    def constant(self, node):
        value = node.value
        if type(value) not in _SCALAR:
            raise _NotPure
        return lambda env: value

    def name(self, node):
        if type(node.ctx) is not ast.Load:
            raise _NotPure
        name = node.id
        self.free.add(name)

        def load(env):
            overlay = env[0]
            if overlay is not None and name in overlay:
                return overlay[name]
            return env[1][name]

        return load

    def subscript(self, node):
        value = self.expr(node.value)
        s = node.slice
        if type(s) is ast.Slice:
            lo, hi, step = self.optional(s.lower), self.optional(s.upper), self.optional(s.step)

            def part(fn, env):
                return None if fn is None else fn(env)

            return lambda env: _slice(value(env), part(lo, env), part(hi, env), part(step, env))
        key = self.expr(s)
        return lambda env: _item(value(env), key(env))

    def binop(self, node):
        op = _BINOPS.get(type(node.op))
        if op is None:
            raise _NotPure
        left, right = self.expr(node.left), self.expr(node.right)
        return lambda env: op(left(env), right(env))

    def unaryop(self, node):
        op = _UNARYOPS[type(node.op)]
        operand = self.expr(node.operand)
        return lambda env: op(operand(env))

    def boolop(self, node):
        values = [self.expr(v) for v in node.values]
        first, rest = values[0], values[1:]
        if type(node.op) is ast.And:

            def both(env):
                v = first(env)
                for fn in rest:
                    if not _truth(v):
                        return v
                    v = fn(env)
                return v

            return both

        def either(env):
            v = first(env)
            for fn in rest:
                if _truth(v):
                    return v
                v = fn(env)
            return v

        return either

    def compare(self, node):
        left = self.expr(node.left)
        pairs = [(_CMPOPS[type(op)], self.expr(c)) for op, c in zip(node.ops, node.comparators)]

        def compare(env):
            a = left(env)
            for op, fn in pairs:
                b = fn(env)
                if not op(a, b):
                    return False
                a = b
            return True

        return compare

    def ifexp(self, node):
        test, body, orelse = self.expr(node.test), self.expr(node.body), self.expr(node.orelse)
        return lambda env: body(env) if _truth(test(env)) else orelse(env)

    def _elements(self, nodes):
        parts = []
        for e in nodes:
            if type(e) is ast.Starred:
                parts.append((True, self.expr(e.value)))
            else:
                parts.append((False, self.expr(e)))

        def build(env):
            out = []
            for star, fn in parts:
                v = fn(env)
                if star:
                    out.extend(_iter_of(_sized(v)))
                else:
                    out.append(v)
                if len(out) > MAX_LEN:
                    raise _Fail
            return out

        return build

    def list_(self, node):
        if type(node.ctx) is not ast.Load:
            raise _NotPure
        return self._elements(node.elts)

    def tuple_(self, node):
        if type(node.ctx) is not ast.Load:
            raise _NotPure
        build = self._elements(node.elts)
        return lambda env: tuple(build(env))

    def set_(self, node):
        build = self._elements(node.elts)

        def make(env):
            items = build(env)
            for v in items:
                if type(v) not in _SCALAR:
                    raise _Fail
            return set(items)

        return make

    def dict_(self, node):
        parts = [(self.optional(k), self.expr(v)) for k, v in zip(node.keys, node.values)]

        def make(env):
            out = {}
            for key, value in parts:
                if key is None:
                    v = value(env)
                    if type(v) is not dict or not _keys_scalar(v):
                        raise _Fail
                    out.update(v)
                else:
                    k = key(env)
                    if type(k) not in _SCALAR:
                        raise _Fail
                    out[k] = value(env)
            return out

        return make

    def joinedstr(self, node):
        parts = []
        for v in node.values:
            if type(v) is ast.Constant:
                parts.append(self.constant(v))
            elif type(v) is ast.FormattedValue:
                value, spec = self.expr(v.value), self.optional(v.format_spec)
                parts.append(self._formatted(value, v.conversion, spec))
            else:
                raise _NotPure

        def join(env):
            out = "".join([part(env) for part in parts])
            if len(out) > MAX_LEN:
                raise _Fail
            return out

        return join

    @staticmethod
    def _formatted(value, conversion, spec):
        return lambda env: _fmt(value(env), conversion, "" if spec is None else spec(env))

    def call(self, node):
        func = node.func
        if any(type(a) is ast.Starred for a in node.args):
            raise _NotPure
        args = [self.expr(a) for a in node.args]
        if type(func) is ast.Name:
            spec = _FUNCS.get(func.id)
            if spec is None or func.id in self.shadowed:
                raise _NotPure
            fn, fewest, most, allowed = spec
            if not fewest <= len(args) <= most:
                raise _NotPure
            kwargs = []
            for k in node.keywords:
                if k.arg not in allowed:
                    raise _NotPure
                kwargs.append((k.arg, self.expr(k.value)))
            name, original = func.id, _ORIGINAL[func.id]

            def call(env):
                if name in env[1] or _bdict.get(name) is not original:
                    raise _Fail  # the program shadowed or replaced the built-in
                return fn(*[a(env) for a in args], **{k: v(env) for k, v in kwargs})

            return call
        if type(func) is ast.Attribute and not node.keywords:
            method = func.attr
            arity = _METHOD_ARITY.get(method)
            if method not in _STR_METHODS and (arity is None or not arity[0] <= len(args) <= arity[1]):
                raise _NotPure
            receiver = self.expr(func.value)

            def call(env):
                r = receiver(env)
                t = type(r)
                if t is str:
                    m = _STR_METHODS.get(method)
                elif t is dict:
                    m = _DICT_METHODS.get(method)
                else:
                    m = None
                if m is None:
                    raise _Fail
                return m(r, *[a(env) for a in args])

            return call
        raise _NotPure


_COMPILE = {
    ast.Constant: _Compiler.constant,
    ast.Name: _Compiler.name,
    ast.Subscript: _Compiler.subscript,
    ast.BinOp: _Compiler.binop,
    ast.UnaryOp: _Compiler.unaryop,
    ast.BoolOp: _Compiler.boolop,
    ast.Compare: _Compiler.compare,
    ast.IfExp: _Compiler.ifexp,
    ast.List: _Compiler.list_,
    ast.Tuple: _Compiler.tuple_,
    ast.Set: _Compiler.set_,
    ast.Dict: _Compiler.dict_,
    ast.JoinedStr: _Compiler.joinedstr,
    ast.Call: _Compiler.call,
}


def _binder(target):
    """(bind, names) for a loop target made of names, tuples and lists of names."""
    t = type(target)
    if t is ast.Name:
        name = target.id

        def bind(overlay, value):
            overlay[name] = value

        return bind, {name}
    if t is ast.Tuple or t is ast.List:
        parts = [_binder(e) for e in target.elts]
        names = set()
        for _, n in parts:
            names |= n
        binds = [b for b, _ in parts]
        count = len(binds)

        def unpack(overlay, value):
            tv = type(value)
            if (tv is not tuple and tv is not list and tv is not str) or len(value) != count:
                raise _Fail
            for b, v in zip(binds, value):
                b(overlay, v)

        return unpack, names
    raise _NotPure


# Plans: what one prepare statement runs ------------------------------------


def _single_plan(tool, names, fns):
    def plan(env, spare=False):
        return _offer_call(tool, names, fns, env, spare)

    return plan


def _batch_plan(gens, calls):
    """Prepare calls for each element of gens (a loop or a comprehension's for clauses):
    gens is [(bind, iterable, filters)], calls [(tool, names, fns)]. At most CAP
    prepares and MAX_VISITS elements."""

    def plan(env, spare=False):
        budget = [CAP, MAX_VISITS]
        return _batch(gens, 0, env[0], env[1], calls, budget, spare)

    return plan


def _batch(gens, k, overlay, ns, calls, budget, spare):
    bind, iterable, filters = gens[k]
    try:
        it = _iter_of(iterable((overlay, ns)))
    except Exception:
        return None
    last = k + 1 == len(gens)
    for item in it:
        budget[1] -= 1
        if budget[0] <= 0 or budget[1] < 0:
            return None
        inner = dict(overlay) if overlay else {}
        try:
            bind(inner, item)
            env = (inner, ns)
            skip = False
            for f in filters:
                if not _truth(f(env)):
                    skip = True
                    break
        except Exception:
            continue
        if skip:
            continue
        if not last:
            if _batch(gens, k + 1, inner, ns, calls, budget, spare) is False:
                return False
            continue
        for tool, names, fns in calls:
            budget[0] -= 1
            if _offer_call(tool, names, fns, env, spare) is False:
                return False
            if budget[0] <= 0:
                return None
    return None


# ---------------------------------------------------------------------------
# What statements bind.

_COMPS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
_FUNCDEFS = (ast.FunctionDef, ast.AsyncFunctionDef)
_DYNAMIC = frozenset(("exec", "eval", "globals", "locals", "vars", "setattr", "delattr", "__import__"))
# Methods that do not change their receiver (on the types programs use them with).
_READONLY = frozenset(
    (
        "get keys values items copy count index find rfind startswith endswith lower upper strip "
        "lstrip rstrip split rsplit splitlines join format replace title capitalize casefold "
        "partition rpartition isdigit isalpha isalnum isspace islower isupper isnumeric isdecimal "
        "encode decode removeprefix removesuffix zfill center ljust rjust hex"
    ).split()
)


def _base(node):
    while type(node) is ast.Attribute or type(node) is ast.Subscript:
        node = node.value
    return node.id if type(node) is ast.Name else None


# Fields that never hold nodes (names, operators, flags) or whose nodes have none.
_SCALAR_FIELDS = frozenset(
    "ctx op id attr arg name names asname module level kind conversion is_async simple "
    "type_comment type_ignores rest kwd_attrs".split()
)
_FIELDS = {}


def _node_fields(t):
    if t is ast.Constant or t is ast.MatchSingleton:
        return ()
    return tuple(f for f in t._fields if f not in _SCALAR_FIELDS)


def _children(node, out):
    """Append node's child nodes to out (faster than ast.iter_child_nodes)."""
    t = type(node)
    fields = _FIELDS.get(t)
    if fields is None:
        fields = _FIELDS[t] = _node_fields(t)
    for f in fields:
        v = getattr(node, f, None)
        if v is None:
            continue
        if type(v) is list:
            for x in v:
                if x is not None:
                    out.append(x)
        elif isinstance(v, ast.AST):
            out.append(v)


_NO_EFFECTS = (frozenset(), frozenset(), False)


_STMTS = frozenset(c for c in vars(ast).values() if isinstance(c, type) and issubclass(c, ast.stmt))
_SCOPES = frozenset((ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda))


class _Facts:
    """One walk over statements: every name any scope of them binds (bound), every
    attribute they assign or delete (attrs), every name a global statement declares
    (declared), and for each statement outside function and class bodies, at any depth,
    its effects: (rebound, mutated, everything) — the names it may bind or delete, the
    names whose objects it may change in place, and whether it may bind any name at all
    (exec, globals(), star imports). calls holds the ids of the statements whose own
    expressions call a name ending in one of leaves (the last parts of tool names)."""

    def __init__(self, stmts, leaves=frozenset()):
        self.bound, self.attrs, self.declared = set(), set(), set()
        self.effects = {}
        self.calls = set()
        self.leaves = leaves
        for stmt in stmts:
            self.statement(stmt)

    def changes(self, stmt):
        """The names stmt may rebind or change, or None for "any name"."""
        rebound, mutated, everything = self.effects.get(id(stmt), _NO_EFFECTS)
        return None if everything else rebound | mutated

    def statement(self, stmt):
        Name, Load, Constant, Call = ast.Name, ast.Load, ast.Constant, ast.Call
        Attribute, Subscript = ast.Attribute, ast.Subscript
        fields_of, AST, stmts, leaves = _FIELDS, ast.AST, _STMTS, self.leaves
        bound, attrs = self.bound, self.attrs
        rebound, mutated = set(), set()
        everything = calls = False
        stack = [(stmt, False)]
        pop, push = stack.pop, stack.append
        while stack:
            node, comp = pop()
            t = type(node)
            if t is Name:
                if type(node.ctx) is not Load:
                    bound.add(node.id)
                    if not comp:
                        rebound.add(node.id)
                continue
            if t is Constant:
                continue
            if t in stmts and node is not stmt:
                r, m, e = self.statement(node)
                rebound |= r
                mutated |= m
                everything = everything or e
                continue
            if t is Call:
                func = node.func
                tf = type(func)
                if tf is Attribute:
                    if func.attr in leaves:
                        calls = True
                    if func.attr not in _READONLY:
                        base = _base(func.value)
                        if base is not None:
                            mutated.add(base)
                elif tf is Name:
                    if func.id in leaves:
                        calls = True
                    elif func.id in _DYNAMIC:
                        everything = True
            elif t is Attribute or t is Subscript:
                if type(node.ctx) is not Load:
                    if t is Attribute:
                        attrs.add(node.attr)
                    base = _base(node)
                    if base is not None:
                        mutated.add(base)
            elif t in _SCOPES:
                if t is not ast.Lambda:
                    bound.add(node.name)
                    rebound.add(node.name)
                # What the statement evaluates: decorators, defaults, bases.
                evaluated = list(getattr(node, "decorator_list", ()))
                if t is ast.ClassDef:
                    evaluated += node.bases
                    evaluated += [k.value for k in node.keywords]
                else:
                    evaluated += node.args.defaults
                    evaluated += [d for d in node.args.kw_defaults if d is not None]
                for e in evaluated:
                    push((e, comp))
                self.scope(node)
                continue
            elif t is ast.NamedExpr:
                bound.add(node.target.id)
                rebound.add(node.target.id)
                push((node.value, comp))
                continue
            elif t is ast.Import or t is ast.ImportFrom:
                for alias in node.names:
                    if alias.name == "*":
                        everything = True
                    else:
                        name = alias.asname or alias.name.partition(".")[0]
                        bound.add(name)
                        rebound.add(name)
                continue
            elif t is ast.ExceptHandler or t is ast.MatchAs or t is ast.MatchStar:
                if node.name:
                    bound.add(node.name)
                    rebound.add(node.name)
            elif t is ast.MatchMapping:
                if node.rest:
                    bound.add(node.rest)
                    rebound.add(node.rest)
            elif t is ast.Global or t is ast.Nonlocal:
                bound.update(node.names)
                if t is ast.Global:
                    self.declared.update(node.names)
                continue
            elif t in _COMPS:
                comp = True
            fields = fields_of.get(t)
            if fields is None:
                fields = _FIELDS[t] = _node_fields(t)
            for f in fields:
                v = getattr(node, f, None)
                if v is None:
                    continue
                if type(v) is list:
                    for x in v:
                        if x is not None:
                            push((x, comp))
                elif isinstance(v, AST):
                    push((v, comp))
        result = (rebound, mutated, everything)
        self.effects[id(stmt)] = result
        if calls:
            self.calls.add(id(stmt))
        return result

    def scope(self, node):
        """Names bound in a function, lambda or class: they count for bound, attrs and declared only."""
        bound, attrs = self.bound, self.attrs
        stack = []
        _children(node, stack)
        while stack:
            n = stack.pop()
            t = type(n)
            if t is ast.Name:
                if type(n.ctx) is not ast.Load:
                    bound.add(n.id)
                continue
            if t is ast.arg:
                bound.add(n.arg)
            elif t is ast.Attribute:
                if type(n.ctx) is not ast.Load:
                    attrs.add(n.attr)
            elif t in _FUNCDEFS or t is ast.ClassDef:
                bound.add(n.name)
            elif t is ast.Import or t is ast.ImportFrom:
                for alias in n.names:
                    bound.add(alias.asname or alias.name.partition(".")[0])
            elif t is ast.ExceptHandler or t is ast.MatchAs or t is ast.MatchStar:
                if n.name:
                    bound.add(n.name)
            elif t is ast.MatchMapping:
                if n.rest:
                    bound.add(n.rest)
            elif t is ast.Global or t is ast.Nonlocal:
                bound.update(n.names)
                if t is ast.Global:
                    self.declared.update(n.names)
                continue
            elif t is ast.NamedExpr:
                bound.add(n.target.id)
            _children(n, stack)


def _dotted(node):
    """"a.b.c" for the expression a.b.c (names only), else None."""
    parts = []
    while type(node) is ast.Attribute:
        parts.append(node.attr)
        node = node.value
    if type(node) is not ast.Name:
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def _usable_tools(early, bound, attrs):
    """The early tools the code never rebinds (a rebound name makes a prepare useless)."""
    tools = set()
    for name in early:
        segments = name.split(".")
        if segments[0] in bound or any(s in attrs for s in segments[1:]):
            continue
        tools.add(name)
    return tools


# ---------------------------------------------------------------------------
# Finding the calls to prepare.


class _Cand:
    """One thing to prepare: a single call or a batch over a loop or comprehension."""

    __slots__ = ("plan", "free", "text", "single", "calls", "node", "lead", "home")

    def __init__(self, plan, free, text, single=None, calls=(), node=None):
        self.plan = plan  # plan(env, spare) -> True / False / None
        self.free = free  # names the arguments read
        self.text = text  # () -> the plan's key: its source text
        self.single = single  # (tool, names, fns) for one call, else None
        self.calls = calls  # (tool, keyword names) of each call it prepares
        self.node = node  # the call, for one call
        self.home = 0  # the number (_Pass.count) of the statement that makes the call(s)
        # True when its prepare would land right before the statement that makes the call,
        # with nothing but quiet evaluation (_first_event) between the two: the prepare
        # cannot win time, and _Pass.finish leaves it out unless a read of the same request
        # may be pending then.
        self.lead = False


class _Scanner:
    """Finds the early-read calls an expression always makes when it is evaluated."""

    def __init__(self, tools, shadowed, source):
        self.tools = tools
        self.shadowed = shadowed
        self.source = source
        self._starts = None

    # Source text of nodes, for plan keys (col offsets count UTF-8 bytes).
    def segment(self, node):
        try:
            if self._starts is None:
                data = self.source.encode("utf-8")
                starts, at = [0], 0
                for line in data.splitlines(True):
                    at += len(line)
                    starts.append(at)
                self._data, self._starts = data, starts
            start = self._starts[node.lineno - 1] + node.col_offset
            end = self._starts[node.end_lineno - 1] + node.end_col_offset
            return self._data[start:end].decode("utf-8")
        except Exception:
            return ast.unparse(node)

    def single(self, node):
        """A candidate for the call node, if it calls an early tool with pure arguments."""
        tool = _dotted(node.func)
        if tool is None or tool not in self.tools or node.args:
            return None
        compiler = _Compiler(self.shadowed)
        try:
            names = []
            fns = []
            for k in node.keywords:
                if k.arg is None:
                    return None
                names.append(k.arg)
                fns.append(compiler.expr(k.value))
        except (_NotPure, RecursionError):
            return None
        names = tuple(names)
        plan = _single_plan(tool, names, fns)
        return _Cand(plan, compiler.free, lambda: self.segment(node), (tool, names, fns), ((tool, names),), node)

    def scan(self, node, out):
        """Append to out the candidates for the calls node makes whenever it is evaluated,
        in the order it makes them. Conditional parts (if-expression branches, the right of
        and/or, the rest of a comparison chain) and nested scopes are not entered."""
        t = type(node)
        if t is ast.Call:
            cand = self.single(node)
            if cand is not None:
                out.append(cand)
                return
        elif t in _COMPS:
            self.scan(node.generators[0].iter, out)
            cand = self.comprehension(node)
            if cand is not None:
                out.append(cand)
            return
        elif t is ast.Lambda:
            return
        elif t is ast.IfExp:
            self.scan(node.test, out)
            return
        elif t is ast.BoolOp:
            self.scan(node.values[0], out)
            return
        elif t is ast.Compare:
            self.scan(node.left, out)
            self.scan(node.comparators[0], out)
            return
        children = []
        _children(node, children)
        for child in children:
            self.scan(child, out)

    def element_calls(self, node, out):
        """The early-tool calls with pure arguments in a comprehension's element."""
        found = []
        self.scan(node, found)
        out.extend(c for c in found if c.single is not None)

    def comprehension(self, node):
        """A batch candidate: every element's calls, prepared when the comprehension starts."""
        try:
            gens = []
            targets = set()
            free = set()
            for k, g in enumerate(node.generators):
                if g.is_async:
                    return None
                bind, names = _binder(g.target)
                compiler = _Compiler(self.shadowed)
                iterable = compiler.expr(g.iter)
                # The first iterable is evaluated outside the comprehension.
                free |= compiler.free if k == 0 else compiler.free - targets
                targets |= names
                compiler.free = set()
                filters = [compiler.expr(f) for f in g.ifs]
                free |= compiler.free - targets
                gens.append((bind, iterable, filters))
        except (_NotPure, RecursionError):
            return None
        calls = []
        if type(node) is ast.DictComp:
            self.element_calls(node.key, calls)
            self.element_calls(node.value, calls)
        else:
            self.element_calls(node.elt, calls)
        if not calls:
            return None
        for c in calls:
            free |= c.free - targets
        plan = _batch_plan(gens, [c.single for c in calls])
        return _Cand(plan, free, lambda: self.segment(node), None, [c.calls[0] for c in calls])

    def loop(self, stmt, cands):
        """A batch candidate for the body calls of a for statement that can be computed
        from the loop variables and names the body does not change, or None."""
        try:
            bind, targets = _binder(stmt.target)
            compiler = _Compiler(self.shadowed)
            iterable = compiler.expr(stmt.iter)
        except (_NotPure, RecursionError):
            return None
        free = set(compiler.free)
        for c in cands:
            free |= c.free - targets

        def text():
            calls = "; ".join(c.text() for c in cands)
            return f"for {self.segment(stmt.target)} in {self.segment(stmt.iter)}: {calls}"

        plan = _batch_plan([(bind, iterable, [])], [c.single for c in cands])
        return _Cand(plan, free, text, None, [c.calls[0] for c in cands])


def _header(stmt):
    """The expressions a statement evaluates when it starts, in order (the whole statement
    for simple statements), or None for a statement whose parts the pass leaves alone."""
    t = type(stmt)
    if t is ast.Expr:
        return [stmt.value]
    if t is ast.Assign:
        return [stmt.value] + stmt.targets
    if t is ast.AugAssign:
        return [stmt.target, stmt.value]
    if t is ast.AnnAssign:
        return [stmt.target] if stmt.value is None else [stmt.value, stmt.target]
    if t is ast.If or t is ast.While:
        return [stmt.test]
    if t is ast.For:
        return [stmt.iter]
    if t is ast.With:
        return [item.context_expr for item in stmt.items]
    if t is ast.Match:
        return [stmt.subject]
    if t is ast.Return:
        return [] if stmt.value is None else [stmt.value]
    if t is ast.Delete:
        return stmt.targets
    if t is ast.Raise:
        return [e for e in (stmt.exc, stmt.cause) if e is not None]
    if t is ast.Assert:
        return [stmt.test]
    return []


# What evaluating an expression may do before a call in it is made. Quiet: loading names,
# constants and attributes, building lists and tuples, keyword arguments, slices, making a
# lambda. Anything else (another call, a subscript, an operator, a comparison, a truth
# test, formatting, a dict or set display, a starred, ** or comprehension iteration) is work.
_QUIET_LEAVES = frozenset((ast.Name, ast.Constant, ast.Lambda))
_QUIET_OPS = frozenset((ast.Attribute, ast.List, ast.Tuple, ast.keyword, ast.Slice))
_MAX_DISPLAY = 16  # dict displays up to this many pairs are built after all their parts


def _first_event(node, calls):
    """What evaluating node does first: the candidate of calls (call node id -> candidate)
    whose call is made before any work (its own callee and arguments aside), True when
    some work comes first, None when node does nothing but quiet evaluation."""
    cand = calls.get(id(node))
    if cand is not None:
        return cand
    t = type(node)
    if t in _QUIET_LEAVES:
        return None
    if t is ast.Dict:
        keys = node.keys
        if len(keys) > _MAX_DISPLAY:
            return True  # built in chunks: earlier keys are hashed first
        children = []
        for k, v in zip(keys, node.values):
            if k is None:  # **mapping is merged in before what follows
                found = _first_event(v, calls)
                return True if found is None else found
            children.append(k)
            children.append(v)
    elif t is ast.BoolOp:
        children = node.values[:1]  # the rest only after a truth test
    elif t is ast.IfExp:
        children = [node.test]
    elif t is ast.Compare:
        children = [node.left, node.comparators[0]]
    elif t in _COMPS:
        children = [node.generators[0].iter]
    else:
        children = []
        _children(node, children)
    for child in children:
        found = _first_event(child, calls)
        if found is not None:
            return found
    if t in _QUIET_OPS and (t is not ast.keyword or node.arg is not None):
        return None
    return True  # including f(**mapping), which merges the mapping in


def _first_candidate(stmt, cands):
    """The candidate among cands (the candidates of stmt's own expressions, in the order
    it evaluates them) whose call stmt makes before doing any work, or None."""
    header = _header(stmt)
    first = cands[0]
    if first.node is header[0]:  # x = tool(...), tool(...): the statement starts with it
        return first
    calls = {}
    for c in cands:
        if c.single is not None:
            calls[id(c.node)] = c
    if not calls:
        return None
    entering = type(stmt) is ast.With
    try:
        for expr in header:
            found = _first_event(expr, calls)
            if found is not None:
                return None if found is True else found
            if entering:
                return None  # the context manager's __enter__ runs before the next item
    except RecursionError:
        pass
    return None


# ---------------------------------------------------------------------------
# The PLM pass.


class _Pass:
    """Inserts prepare statements into blocks of module-level code.

    block() walks one block: each statement's candidates (its own calls, the calls of
    try and with bodies, which start with the statement, and for-loop batches) go to the
    earliest point of the block after the last statement that may rebind or change a name
    they read; those that can go to the start of the block are returned to the caller.
    if/elif/else branches, loop bodies, except/else/finally clauses and match cases are
    blocks of their own: what they return is prepared when they are entered.

    Prepares are recorded (place) and inserted at the end (finish), once it is known which
    are worth it: a single call whose prepare would land right before the statement that
    makes it, with nothing but quiet evaluation between the two (cand.lead), is not
    prepared — its read would start when the call starts it anyway — unless a read of the
    same tool with the same keyword names may be pending then (see finish). Statements
    are numbered in source order (count, seq) to tell when a read may be pending."""

    def __init__(self, scanner, facts, declared, helper, insert=True):
        self.scanner = scanner
        self.facts = facts
        self.declared = declared  # names some function may rebind at any time
        self.helper = helper
        self.insert = insert
        self.plans = {}
        self.places = []  # (block, index, candidates to prepare just before block[index])
        self.count = 0  # statements numbered so far, in source order (nested ones included)
        self.seq = {}  # id(statement) -> its number

    def block(self, stmts, start=0):
        last = {}  # name -> index of the last statement that may rebind or change it
        last_all = start - 1  # index of the last statement that may rebind anything
        placed = {}  # index -> candidates to prepare just before stmts[index]
        lifted = []
        insert = self.insert
        for i in range(start, len(stmts)):
            stmt = stmts[i]
            seq = self.seq[id(stmt)] = self.count
            self.count += 1
            cands = self.candidates(stmt)
            first = None  # the candidate stmt's evaluation starts with, once needed
            for cand in cands:
                if cand.free & self.declared:
                    continue
                at = last_all
                for name in cand.free:
                    j = last.get(name, -1)
                    if j > at:
                        at = j
                at += 1
                if max(at, start) < i:
                    cand.lead = False  # hoisted above at least one statement
                elif insert and cand.home == seq and cand.single is not None:
                    # One of stmt's own calls, prepared right before stmt: a lead if the
                    # statement makes it first (lifted calls of a try body come marked).
                    if first is None:
                        first = _first_candidate(stmt, [c for c in cands if c.home == seq]) or False
                    cand.lead = cand is first
                if at <= start:
                    lifted.append(cand)
                else:
                    placed.setdefault(at, []).append(cand)
            changed = self.facts.changes(stmt)
            if changed is None:
                last_all = i
            else:
                for name in changed:
                    last[name] = i
        for at, cands in placed.items():
            self.place(stmts, at, cands)
        return lifted

    def place(self, stmts, at, cands):
        """Prepare cands just before stmts[at] (recorded; finish inserts)."""
        if cands and self.insert:
            self.places.append((stmts, at, cands, self.seq[id(stmts[at])]))

    def entry(self, stmts):
        """A block entered as a whole: its candidates are prepared at its start."""
        self.place(stmts, 0, self.block(stmts))

    def finish(self, pending_calls=frozenset()):
        """Insert the recorded prepares that are worth it.

        A lead candidate is dropped unless a read of the same tool with the same keyword
        names may be pending when its call is made: the call would claim that read (calls
        claim by request bytes), leaving the call it was prepared for without one. Such a
        read is one the pass prepares for another call, from its prepare's statement to the
        statement that makes that call (a loop's batch: to the end of the loop's body), or
        one already pending (pending_calls: the (tool, keyword names) of prefix mode's
        reads, pending for the whole program as far as the pass knows)."""
        places = self.places
        self.places = []
        leads = None
        for _, _, cands, _ in places:
            for c in cands:
                if c.lead:
                    if leads is None:
                        leads = []
                    leads.append(c)
        if leads is not None:
            keep = self.at_risk(places, leads, pending_calls)
        if len(places) > 1:
            # Each block's prepares from its end to its start, so indices stay valid.
            places.sort(key=lambda p: p[1], reverse=True)
        for stmts, at, cands, _ in places:
            if leads is not None:
                cands = [c for c in cands if not c.lead or id(c) in keep]
                if not cands:
                    continue
            stmts.insert(at, self.prepare_stmt(cands, stmts[at]))

    @staticmethod
    def at_risk(places, leads, always):
        """The ids of the lead candidates whose call may find a read of its signature
        pending (see finish); always: signatures pending for the whole program."""
        wanted = {c.calls[0] for c in leads}
        spans = {}  # (tool, keyword names) -> [(first, last) statement numbers]
        for _, _, cands, first in places:
            for c in cands:
                if not c.lead:
                    for sig in c.calls:
                        if sig in wanted:
                            spans.setdefault(sig, []).append((first, c.home))
        keep = set()
        for c in leads:
            sig = c.calls[0]
            if sig in always:
                keep.add(id(c))
                continue
            at = c.home
            for first, last in spans.get(sig, ()):
                if first <= at <= last:
                    keep.add(id(c))
                    break
        return keep

    def candidates(self, stmt):
        t = type(stmt)
        out = []
        if id(stmt) in self.facts.calls:
            header = _header(stmt)
            for expr in header:
                self.scanner.scan(expr, out)
            if out and self.insert:
                home = self.count - 1
                for c in out:
                    c.home = home
        if t is ast.If or t is ast.While:
            self.entry(stmt.body)
            if stmt.orelse:
                self.entry(stmt.orelse)
        elif t is ast.For:
            self.loop(stmt, out)
        elif t is ast.Try or t is ast.TryStar:
            out.extend(self.block(stmt.body))
            for handler in stmt.handlers:
                self.entry(handler.body)
            for clause in (stmt.orelse, stmt.finalbody):
                if clause:
                    self.entry(clause)
        elif t is ast.With:
            targets = set()
            for item in stmt.items:
                if item.optional_vars is not None:
                    for node in ast.walk(item.optional_vars):
                        if type(node) is ast.Name:
                            targets.add(node.id)
            inner = []
            for cand in self.block(stmt.body):
                if cand.free & targets:
                    inner.append(cand)
                else:
                    cand.lead = False  # the context expressions and __enter__ run first
                    out.append(cand)
            self.place(stmt.body, 0, inner)
        elif t is ast.Match:
            for case in stmt.cases:
                self.entry(case.body)
        return out

    def loop(self, stmt, out):
        lifted = self.block(stmt.body)
        changed = set()
        anything = False
        for s in stmt.body:
            c = self.facts.changes(s)
            if c is None:
                anything = True
            else:
                changed |= c
        batch, rest = [], []
        for cand in lifted:
            if cand.single is not None and not anything and not cand.free & changed:
                batch.append(cand)
            else:
                rest.append(cand)
        whole = self.scanner.loop(stmt, batch) if batch else None
        if whole is None:
            rest = lifted
        else:
            whole.home = self.count - 1  # its reads may be pending until the body's end
            out.append(whole)
        self.place(stmt.body, 0, rest)
        if stmt.orelse:
            self.entry(stmt.orelse)

    def key(self, cand):
        key = cand.text()
        # The same text means the same computation: the first plan serves them all.
        self.plans.setdefault(key, cand.plan)
        return key

    def prepare_stmt(self, cands, at):
        where = {
            "lineno": at.lineno,
            "col_offset": at.col_offset,
            "end_lineno": at.end_lineno,
            "end_col_offset": at.end_col_offset,
        }
        name = ast.Name(id=self.helper, ctx=ast.Load(), **where)
        args = [ast.Constant(value=self.key(c), **where) for c in cands]
        return ast.Expr(value=ast.Call(func=name, args=args, keywords=[], **where), **where)


def _module_start(body):
    """Where module-level prepares may go: after the docstring and __future__ imports."""
    start = 0
    if body and type(body[0]) is ast.Expr:
        value = body[0].value
        if type(value) is ast.Constant and type(value.value) is str:
            start = 1
    while start < len(body) and type(body[start]) is ast.ImportFrom and body[start].module == "__future__":
        start += 1
    return start


_BLOCKS = frozenset((ast.For, ast.AsyncFor, ast.While, ast.If, ast.With, ast.AsyncWith, ast.Try, ast.TryStar, ast.Match))
# Expressions that run code of their own or make a call of their own.
_NOT_PLAIN = frozenset((ast.Call, ast.Lambda, ast.NamedExpr, ast.Await, ast.Yield, ast.YieldFrom)) | frozenset(_COMPS)


def _nothing_to_prepare(body, start, facts):
    """A quick look that spares the pass for a common kind of program: True when body is
    straight-line code in which every statement calling a tool makes exactly one call,
    first, and that statement is the first of the module (start) or reads a name the one
    before it may change. Then every prepare would land right before its own statement
    (a lead, not worth it, and no read of any kind is pending then): the pass would insert
    nothing. False when unsure (the pass decides)."""
    calls = facts.calls
    for i in range(start, len(body)):
        if type(body[i]) in _BLOCKS:
            return False
    found = []
    for i in range(start, len(body)):
        stmt = body[i]
        t = type(stmt)
        if id(stmt) not in calls:
            continue
        if t is ast.Expr or t is ast.Assign:
            call = stmt.value
        elif (t is ast.AugAssign or t is ast.AnnAssign) and type(stmt.target) is ast.Name:
            call = stmt.value
        else:
            return False
        if type(call) is not ast.Call:
            return False
        if i > start:
            changed = facts.changes(body[i - 1])
            if changed is not None:
                nodes = [k.value for k in call.keywords]
                while nodes:
                    node = nodes.pop()
                    if type(node) is ast.Name and node.id in changed:
                        break
                    _children(node, nodes)
                else:
                    return False  # the call's arguments could be computed a statement earlier
        found.append((stmt, call))
    # The call must be the statement's only one (nor may it hold a comprehension or lambda).
    for stmt, call in found:
        nodes = [stmt]
        while nodes:
            node = nodes.pop()
            if type(node) in _NOT_PLAIN and node is not call:
                return False
            _children(node, nodes)
    return True


def transform(tree, source, filename, early, namespace):
    """Insert prepares for calls of the early tools (a set of names) into tree, a Module
    parsed from source, and keep the plans they run. Returns the tree to run: tree, or
    a fresh parse of source when the pass failed half-way. namespace is the dict the
    program runs in. A program that mentions the helper's name is left as it is."""
    global _ns
    tools = [t for t in early if t.rpartition(".")[2] in source]
    if not tools or HELPER in source:
        return tree
    try:
        facts = _Facts(tree.body, frozenset(t.rpartition(".")[2] for t in tools))
        if not facts.calls:
            return tree  # no statement the pass looks at calls a tool
        body = tree.body
        start = _module_start(body)
        if start >= len(body) or (not pending and _nothing_to_prepare(body, start, facts)):
            return tree
        bound = facts.bound
        tools = _usable_tools(tools, bound, facts.attrs)
        if not tools:
            return tree
        scanner = _Scanner(tools, bound, source)
        plm = _Pass(scanner, facts, facts.declared, HELPER)
        plm.place(body, start, plm.block(body, start))
        plm.finish(_spare_calls)
    except Exception:
        return compile(source, filename, "exec", ast.PyCF_ONLY_AST, dont_inherit=True)
    if plm.plans:
        _plans.update(plm.plans)
        _ns = namespace
    return tree


# ---------------------------------------------------------------------------
# Prefix mode.


class _Prefix:
    """Reads a program as it streams in and prepares what it can before it has all of it.

    A top-level statement is complete once a later line starts at column 0 with something
    that does not continue it (not else/elif/except/finally, not a comment or blank line)
    and the text before that line parses. Each complete statement is analysed with the
    values known so far: names bound by simple assignments of pure data computed from
    constants and inputs. Anything else a statement binds or may change becomes unknown;
    statements that are not understood are passed over."""

    def __init__(self, inputs, tools):
        self.early = {t["name"] for t in tools if t.get("early")}
        self.leaves = frozenset(t.rpartition(".")[2] for t in self.early)
        self.known = {"inputs": inputs}
        self.alias = {"inputs": frozenset()}  # name -> names whose objects its value may share
        self.rebound = set()  # every name a statement so far binds (no built-in under them)
        self.declared = set()  # names some function declares global: never known
        self.dead = set()  # early tools whose name the program rebinds
        self.buf = bytearray()
        self.consumed = 0  # start of the first statement not yet read
        self.line = -1  # start of the line that may end it, -1 when not found yet
        self.searched = 0  # no newline between the line being looked for and this offset
        self.tried = -1  # the last line start whose preceding text failed to parse
        self.failed = 0  # length of the longest text that failed to parse
        self.scanned = 0  # brackets and strings are known up to this offset:
        self.depth = 0  # open brackets
        self.quote = None  # the quote of the string the text is in, or None
        self.count = 0
        self.stopped = False

    def feed(self, chunk):
        if self.stopped:
            return self.count
        buf = self.buf
        buf += chunk
        n = len(buf)
        while True:
            if self.line < 0:
                nl = buf.find(b"\n", max(self.consumed, self.searched))
                if nl < 0:
                    self.searched = n
                    break
                self.line = self.searched = nl + 1
            at = self.line
            if at >= n:
                break
            if at - self.consumed > MAX_STATEMENT:
                self.stopped = True  # a statement this long is not worth waiting for
                break
            first = buf[at]
            boundary = first not in b" \t\r\n\x0c#"
            if boundary and _word_byte(first) and not 48 <= first <= 57:
                # A line that starts with else/elif/except/finally continues the statement.
                end, limit = at, min(n, at + 9)
                while end < limit and _word_byte(buf[end]):
                    end += 1
                if end == n:
                    break  # the word may go on
                if buf[at:end] in (b"else", b"elif", b"except", b"finally"):
                    boundary = False
            if boundary:
                self.scan(at)
                boundary = self.depth <= 0 and self.quote is None
            size = at - self.consumed
            if boundary and self.tried != at and (self.failed < 2048 or size >= self.failed + 1024):
                # A statement that does not parse though its brackets and strings are
                # closed is tried again at every such line until 2 KiB, then every KiB.
                body = self.parse(bytes(buf[self.consumed : at]))
                if self.stopped:
                    break
                if body is not None:
                    self.consumed = self.searched = self.scanned = at
                    self.line = -1
                    self.failed = self.depth = 0
                    self.quote = None
                    for stmt in body:
                        self.statement(stmt)
                    if self.stopped:
                        break
                    continue
                self.tried = at
                self.failed = size
            nl = buf.find(b"\n", max(at, self.searched))
            if nl < 0:
                self.searched = n
                break
            self.line = self.searched = nl + 1
        return self.count

    def scan(self, end):
        """Follow brackets, strings and comments from self.scanned up to end (a line start)."""
        buf, pos, quote, depth = self.buf, self.scanned, self.quote, self.depth
        while pos < end:
            if quote is not None:
                match = _STRING_STOP[quote].search(buf, pos, end)
                if match is None:
                    pos = end
                elif match.group() == b"\\":
                    pos = match.end() + 1  # an escaped character (raw strings too)
                elif len(quote) == 1 or buf[match.start() : match.start() + 3] == quote:
                    pos, quote = match.start() + len(quote), None
                else:
                    pos = match.end()
                continue
            match = _CODE_STOP.search(buf, pos, end)
            if match is None:
                break
            c = match.group()
            pos = match.end()
            if c == b"#":
                nl = buf.find(b"\n", pos, end)
                pos = end if nl < 0 else nl + 1
            elif c == b"'" or c == b'"':
                triple = bytes(buf[pos - 1 : pos + 2])
                if triple == c * 3:
                    quote, pos = triple, pos + 2
                else:
                    quote = c
            elif c == b"\\":
                pos += 1
            elif c in b"([{":
                depth += 1
            else:
                depth -= 1
        self.scanned, self.quote, self.depth = end, quote, depth

    def parse(self, data):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            self.stopped = True
            return None
        try:
            return compile(text, "<prefix>", "exec", ast.PyCF_ONLY_AST, dont_inherit=True).body
        except (SyntaxError, ValueError):
            return None

    def statement(self, stmt):
        try:
            self._statement(stmt)
        except Exception:
            self.stopped = True

    def _statement(self, stmt):
        facts = _Facts([stmt], self.leaves)
        bound, attrs, declared = facts.bound, facts.attrs, facts.declared
        shadowed = self.rebound | bound
        tools = _usable_tools(self.early - self.dead, bound, attrs)
        if tools:
            scanner = _Scanner(tools, shadowed, "")
            lifted = _Pass(scanner, facts, self.declared | declared, HELPER, insert=False).block([stmt])
            for cand in lifted:
                if cand.free <= self.known.keys() and self.run(cand.plan) is False:
                    break
        if type(stmt) is ast.If and not declared:
            truth = self.value(stmt.test, shadowed)
            if truth is not _UNKNOWN and type(truth) in _TRUTHY:
                for s in stmt.body if truth else stmt.orelse:
                    self.statement(s)
                return
        self.update(stmt, facts, shadowed)

    def run(self, plan):
        try:
            _key_cache.clear()
            ok = plan((None, self.known), True)
        except Exception:
            ok = None
        finally:
            _key_cache.clear()
        self.count = sum([len(handles) for handles in pending.values()])
        return ok

    def value(self, node, shadowed):
        try:
            compiler = _Compiler(shadowed)
            fn = compiler.expr(node)
            if not compiler.free <= self.known.keys():
                return _UNKNOWN
            _key_cache.clear()
            return fn((None, self.known))
        except Exception:
            return _UNKNOWN
        finally:
            _key_cache.clear()

    def update(self, stmt, facts, shadowed):
        bound, attrs, declared = facts.bound, facts.attrs, facts.declared
        self.declared |= declared
        self.rebound |= bound
        for name in self.early:
            segments = name.split(".")
            if segments[0] in bound or any(s in attrs for s in segments[1:]):
                self.dead.add(name)
        rebound, mutated, everything = facts.effects[id(stmt)]
        if everything:
            self.known.clear()
            self.alias.clear()
            return
        values = {}
        targets, value = None, None
        if type(stmt) is ast.Assign:
            targets, value = stmt.targets, stmt.value
        elif type(stmt) is ast.AnnAssign and stmt.value is not None and stmt.simple:
            targets, value = [stmt.target], stmt.value
        if targets is not None:
            values = self.assigned(targets, value, shadowed)
        for name in mutated:
            self.forget_object(name)
        for name in rebound | declared | self.declared:
            self.known.pop(name, None)
            self.alias.pop(name, None)
        for name, (v, shares) in values.items():
            if name not in self.declared:
                self.known[name] = v
                self.alias[name] = shares

    def assigned(self, targets, node, shadowed):
        """name -> (value, aliases) for an assignment of a pure value to names."""
        compiler = _Compiler(shadowed)
        try:
            fn = compiler.expr(node)
        except (_NotPure, RecursionError):
            return {}
        if not compiler.free <= self.known.keys():
            return {}
        try:
            _key_cache.clear()
            value = fn((None, self.known))
        except Exception:
            return {}
        out = {}
        for target in targets:
            try:
                bind, _ = _binder(target)
                overlay = {}
                bind(overlay, value)
            except Exception:
                return {}
            out.update(overlay)
        shares = set()
        for name in compiler.free:
            shares.add(name)
            shares |= self.alias.get(name, frozenset())
        shares |= out.keys()
        result = {}
        for name, v in out.items():
            result[name] = (v, frozenset() if type(v) in _SCALAR else frozenset(shares - {name}))
        return result

    def forget_object(self, name):
        """name's object may have changed: forget every name whose value may share it."""
        group = {name} | self.alias.get(name, frozenset())
        for other in list(self.known):
            if other in group or self.alias.get(other, frozenset()) & group:
                self.known.pop(other, None)
                self.alias.pop(other, None)


_UNKNOWN = object()
# What changes the state of the prefix reader's scan: in code, and in each kind of string.
_CODE_STOP = re.compile(rb"""["'#()\[\]{}\\]""")
_STRING_STOP = {q: re.compile(rb"\\|" + re.escape(q[:1])) for q in (b"'", b'"', b"'''", b'"""')}


def _word_byte(b):
    """Whether byte b can be part of an identifier (any byte of a non-ASCII character can)."""
    return b == 95 or 48 <= b <= 57 or 97 <= (b | 32) <= 122 or b >= 128


def prefix_begin(raw):
    """Start reading a streamed program: raw is {"inputs", "tools", "early_reads"}."""
    global _prefix
    reset()
    request = bootstrap._loads(raw)
    if not request.get("early_reads"):
        return 0
    inputs = request.get("inputs")
    tools = request.get("tools")
    if tools is None:  # the tools installed last (bootstrap._tools)
        tools = bootstrap._tools(None)[1]
    _prefix = _Prefix({} if inputs is None else inputs, tools)
    return 0


def prefix_feed(chunk):
    """Read the next chunk of the program; return how many reads prefix mode has prepared."""
    if _prefix is None:
        return 0
    return _prefix.feed(chunk)


# ---------------------------------------------------------------------------
# Warming up.

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

    call = resolve = None


def warm(rounds=8):
    """Run the pass, the evaluator and the prefix reader on a sample program without a Host.

    CPython 3.11 specializes code the first times it runs; in a Guest image captured after
    this, runs with early reads do not pay for that (about half a millisecond each). Safe to
    call at any time outside a run; leaves nothing behind."""
    global _spine
    real = _spine
    _spine = _NoHost
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
            prefix = _Prefix(inputs, tools)
            data = _WARM_SOURCE.encode()
            for at in range(0, len(data), 40):
                prefix.feed(data[at : at + 40])
            tree = compile(_WARM_SOURCE, "<warm>", "exec", ast.PyCF_ONLY_AST, dont_inherit=True)
            transform(tree, _WARM_SOURCE, "<warm>", early, {"inputs": inputs})
            run_plans(*list(_plans))
            reset()
    finally:
        _spine = real
        reset()
