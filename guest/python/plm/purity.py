"""The purity rules: the expressions an early read's arguments may be, and the evaluator
that computes them before the program does.

``_Compiler`` compiles a pure expression (constants, names, subscripts and slices,
displays, arithmetic, comparisons, conditional expressions, f-strings, a few built-in
functions and ``str`` and ``dict`` methods) into closures of an environment, and raises
``_NotPure`` for anything that could run code of the program. The closures check the
exact built-in type of every operand (``_plain``, ``_keys_scalar``, ``_truth``), bound the
work they do (the MAX_ limits) and raise ``_Fail`` for anything they do not handle. The
built-ins are bound at import, so a program that patches ``builtins`` cannot reach them.
"""

import ast
import builtins as _builtins_module
from builtins import (
    Exception,
    abs,
    any,
    ascii,
    bool,
    dict,
    enumerate,
    float,
    format,
    frozenset,
    getattr,
    id,
    int,
    iter,
    len,
    list,
    max,
    min,
    range,
    repr,
    round,
    set,
    sorted,
    str,
    sum,
    tuple,
    type,
    zip,
)

MAX_LEN = 1 << 20  # longest str, list or tuple an argument evaluation may build
MAX_BITS = 1 << 16  # largest int, in bits, an argument evaluation may compute with
MAX_SORT = 1 << 16  # most elements min/max/sum/sorted/join may look at
MAX_SCAN = 4096  # largest dict or set whose keys a lookup checks
MAX_NODES = 1 << 17  # values a plain-data check may visit

_key_cache = {}  # id(dict or set) -> (object, its keys are scalars), for one batch of prepares

_bdict = _builtins_module.__dict__


# ---------------------------------------------------------------------------
# Plain data: values whose comparison, hashing and encoding run no user code.

# The sets below hold the id()s of exact built-in types: a test `type(x) in {types}`
# would hash type(x), which runs its metaclass's __hash__ and __eq__ (program code).
# `id(type(x)) in _SCALAR` compares only ints.
def _ids(*types):
    return frozenset([id(t) for t in types])


_NONE = type(None)
_KEYS, _VALUES, _ITEMS = type({}.keys()), type({}.values()), type({}.items())
_SCALAR = _ids(int, float, str, bool, _NONE)
_NUMBER = _ids(int, float, bool)
_INT = _ids(int, bool)
_SEQ = _ids(str, list, tuple)
_INDEXABLE = _ids(str, list, tuple, range)
_SIZED = _ids(str, list, tuple, dict, set, frozenset, range, _KEYS, _VALUES, _ITEMS)
_TRUTHY = _SCALAR | _SIZED


class _Fail(Exception):
    """An argument cannot be computed early (never leaves plm)."""


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
        if id(t) in _SCALAR:
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
                if id(type(k)) not in _SCALAR:
                    return False
            push(x.values())
        elif sets and (t is set or t is frozenset):
            budget -= len(x) + 1
            if budget < 0:
                return False
            for k in x:
                if id(type(k)) not in _SCALAR:
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
            if id(type(k)) not in _SCALAR:
                ok = False
                break
    _key_cache[id(container)] = (container, ok)
    return ok


def _truth(v):
    if id(type(v)) not in _TRUTHY:
        raise _Fail
    return bool(v)


def _small(x):
    if type(x) is int and x.bit_length() > MAX_BITS:
        raise _Fail
    return x


def _sized(x, limit=MAX_LEN):
    if id(type(x)) not in _SIZED or len(x) > limit:
        raise _Fail
    return x


def _iter_of(x):
    t = type(x)
    if id(t) in _SIZED:
        return iter(x)
    if t is _Lazy:
        return x.make()
    raise _Fail


# Operators -----------------------------------------------------------------


def _numbers(a, b):
    if id(type(a)) not in _NUMBER or id(type(b)) not in _NUMBER:
        raise _Fail
    _small(a)
    _small(b)


def _add(a, b):
    ta = type(a)
    if id(ta) in _NUMBER and id(type(b)) in _NUMBER:
        return _small(a) + _small(b)
    if ta is type(b) and id(ta) in _SEQ:
        if len(a) + len(b) > MAX_LEN:
            raise _Fail
        return a + b
    raise _Fail


def _sub(a, b):
    _numbers(a, b)
    return a - b


def _mul(a, b):
    ta, tb = type(a), type(b)
    if id(ta) in _NUMBER and id(tb) in _NUMBER:
        if ta is int and tb is int and a.bit_length() + b.bit_length() > MAX_BITS:
            raise _Fail
        return _small(a) * _small(b)
    if id(ta) in _SEQ and id(tb) in _INT:
        seq, n = a, b
    elif id(tb) in _SEQ and id(ta) in _INT:
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
    if id(type(a)) in _INT and id(type(b)) in _INT and b > 0 and max(abs(a).bit_length(), 1) * b > MAX_BITS:
        raise _Fail
    return a ** b


def _ints(a, b):
    if id(type(a)) not in _INT or id(type(b)) not in _INT:
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
    if id(type(a)) not in _NUMBER:
        raise _Fail
    return -a


def _pos(a):
    if id(type(a)) not in _NUMBER:
        raise _Fail
    return +a


def _invert(a):
    if id(type(a)) not in _INT:
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
        if id(type(a)) in _SCALAR and _keys_scalar(b):
            return a in b
    elif tb is list or tb is tuple:
        _comparable(a, b)
        return a in b
    elif tb is range:
        if id(type(a)) in _INT:
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
        if id(type(k)) in _SCALAR and _keys_scalar(v):
            return v[k]
    elif id(t) in _INDEXABLE:
        if id(type(k)) in _INT:
            return v[k]
    raise _Fail


def _slice(v, lo, hi, step):
    if id(type(v)) not in _INDEXABLE:
        raise _Fail
    for b in (lo, hi, step):
        if b is not None and id(type(b)) not in _INT:
            raise _Fail
    return v[lo:hi:step]


def _fmt(v, conversion, spec):
    if id(type(v)) not in _SCALAR or type(spec) is not str:
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
    if id(type(x)) not in _SIZED or len(x) > MAX_SORT:
        raise _Fail
    items = list(x)
    if not _plain(items, True):
        raise _Fail
    return items


def _f_len(x):
    if id(type(x)) not in _SIZED:
        raise _Fail
    return len(x)


def _f_str(x=""):
    if id(type(x)) not in _SCALAR:
        raise _Fail
    return str(x)


def _f_int(x=0):
    t = type(x)
    if id(t) in _NUMBER or (t is str and len(x) <= 1000):
        return int(x)
    raise _Fail


def _f_float(x=0.0):
    t = type(x)
    if id(t) in _NUMBER or (t is str and len(x) <= 1000):
        return float(x)
    raise _Fail


def _f_bool(x=False):
    return _truth(x)


def _f_abs(x):
    if id(type(x)) not in _NUMBER:
        raise _Fail
    return abs(x)


def _f_round(x, n=None):
    if id(type(x)) not in _NUMBER or (n is not None and id(type(n)) not in _INT):
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
        if id(type(v)) not in _NUMBER:
            raise _Fail
    if id(type(start)) not in _NUMBER:
        raise _Fail
    return sum(items, start)


def _f_sorted(x, reverse=False):
    if id(type(reverse)) not in _INT:
        raise _Fail
    return sorted(_elements(x), reverse=reverse)


def _f_list(x=()):
    return list(_sized(x))


def _f_tuple(x=()):
    return tuple(_sized(x))


def _f_range(*args):
    for a in args:
        if id(type(a)) not in _INT:
            raise _Fail
    return range(*args)


def _f_enumerate(x, start=0):
    _sized(x, 1 << 62)
    if id(type(start)) not in _INT:
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
        elif id(t) not in _SCALAR:
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
    if type(old) is not str or type(new) is not str or id(type(count)) not in _INT:
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
        if id(type(width)) not in _INT or width > MAX_LEN:
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
    if id(type(key)) not in _SCALAR or not _keys_scalar(d):
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
        if id(type(value)) not in _SCALAR:
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
            ns = env[1]
            if not _keys_scalar(ns):
                raise _Fail  # a lookup could run a planted key's __eq__
            return ns[name]

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
                if id(type(v)) not in _SCALAR:
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
                    if id(type(k)) not in _SCALAR:
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
                ns = env[1]
                if not _keys_scalar(ns) or not _keys_scalar(_bdict):
                    raise _Fail  # a lookup could run a planted key's __eq__
                if name in ns or _bdict.get(name) is not original:
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
