"""Unit tests of plm.wire.bind: a tool's proxy binds a call as a def with the tool's stub's
signature would, with CPython's own errors.

Run natively with /usr/bin/python3.11 guest/tests/test_wire.py; tests/plm_test.go runs this
file in the real Guest too.
"""

import random
import sys

try:
    import harness
except ImportError:  # in the Guest: tests/plm_test.go passes harness.py's source in inputs
    import types

    harness = types.ModuleType("harness")
    exec(compile(inputs["harness"], "harness.py", "exec"), harness.__dict__)  # noqa: F821
    sys.modules["harness"] = harness

from plm import wire


def _native(required, optional, args, kwargs):
    """What a def f(required..., optional=None...) says of the call: its bound arguments
    (as given, defaults left out), or its TypeError's message."""
    params = list(required) + [f"{name}=None" for name in optional]
    namespace = {}
    exec(f"def f({', '.join(params)}):\n    return locals()", namespace)
    try:
        bound = namespace["f"](*args, **kwargs)
    except TypeError as exc:
        return str(exc)
    given = set(kwargs) | set((list(required) + list(optional))[: len(args)])
    return {key: value for key, value in bound.items() if key in given}


def _bind(required, optional, args, kwargs):
    names = list(required) + list(optional)
    check = wire.check_of({"names": names, "required": list(required), "positional": names})
    try:
        return dict(wire.bind("f", check, tuple(args), dict(kwargs)))
    except TypeError as exc:
        return str(exc)


def test_bind_is_cpythons():
    rng = random.Random(11)
    for _ in range(3000):
        n = rng.randint(0, 4)
        names = [f"p{i}" for i in range(n)]
        r = rng.randint(0, n)
        required, optional = names[:r], names[r:]
        args = [rng.randint(1, 9) for _ in range(rng.randint(0, n + 2))]
        pool = names + ["zz"]
        kwargs = {key: rng.randint(1, 9) for key in rng.sample(pool, rng.randint(0, len(pool)))}
        want = _native(required, optional, args, kwargs)
        got = _bind(required, optional, args, kwargs)
        assert got == want, (required, optional, args, kwargs, got, want)


def test_positional_names_and_order():
    check = wire.check_of({"names": ["location", "speed"], "required": ["location"], "positional": ["location", "speed"]})
    assert list(wire.bind("goto", check, ("k", 3), {}).items()) == [("location", "k"), ("speed", 3)]
    assert list(wire.bind("goto", check, ("k",), {"speed": 3}).items()) == [("location", "k"), ("speed", 3)]
    assert list(wire.bind("goto", check, (), {"speed": 3, "location": "k"}).items()) == [("speed", 3), ("location", "k")]


def test_none_left_out():
    check = wire.check_of({"names": ["key", "limit", "note"], "required": ["key"],
                           "positional": ["key", "limit", "note"], "omit_none": ["limit"]})
    assert wire.bind("f", check, ("a", None, None), {}) == {"key": "a", "note": None}
    assert wire.bind("f", check, (None,), {"limit": None}) == {"key": None}


def test_keyword_only_says_why():
    check = wire.check_of({"names": ["key"], "required": ["key"], "positional": None,
                           "keyword_only": "the order of its parameters is not known"})
    for tool_check, why in [(check, "the order of its parameters is not known"),
                            (None, "it has no input schema to give its parameters an order")]:
        try:
            wire.bind("f", tool_check, ("a",), {})
        except TypeError as exc:
            assert str(exc) == f"f() takes keyword arguments only, as {why} (1 positional argument given)", exc
        else:
            raise AssertionError("no TypeError")
    assert wire.bind("f", None, (), {"any": 1}) == {"any": 1}


def test_accepted_names_as_bind_does():
    wire.keywords["t"] = wire.check_of({"names": ["a", "b"], "required": ["a"], "positional": ["a", "b"], "omit_none": ["b"]})
    try:
        args = {"a": 1, "b": None}
        assert wire.accepted("t", args) == {"a": 1} and args == {"a": 1, "b": None}
        assert wire.accepted("t", {"b": 2}) is None
        assert wire.accepted("t", {"a": 1, "c": 2}) is None
    finally:
        del wire.keywords["t"]


if __name__ == "__main__":  # natively, and in the Guest (where the program is __main__)
    harness.main(globals())
