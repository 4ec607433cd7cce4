"""A tool request's bytes, and whether a tool takes a request's keywords.

``encode_request`` is the only encoder of tool requests in the Guest, so equal arguments
give equal bytes: a prepared early read is claimed by its request's bytes
(``plm.futures.send``). ``encoder`` is the same JSON encoding, for the run's value and the
execute response; ``encode`` is ``encoder.encode``, the same bytes, faster.

``keywords`` holds, for each tool whose proxy checks a call's arguments (bootstrap.make_tool),
what it checks (``check_of``); ``bind`` turns a call's positional and keyword arguments into
the request's keyword arguments, raising TypeError in CPython's words for a call the tool's
parameters do not take, and leaves out the optional ones given as None; ``accepted`` is the
same for a dict of keyword arguments, None for a call that raises. A call that raises does
so before any request, so no read may be started early for it.
"""

import json

__all__ = ["encoder", "encode", "encode_request", "keywords", "check_of", "bind", "accepted"]

keywords = {}  # tool name -> its check (check_of)

# ensure_ascii=False keeps text readable; a lone surrogate is then written out with
# "backslashreplace", which inside a JSON string is exactly its JSON escape.
encoder = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))
# A tool call's own fast path: json's C encoder called directly, without the Python
# layer of JSONEncoder.encode around it.
_make_encoder = json.encoder.c_make_encoder
_encode_str = json.encoder.encode_basestring


def _not_json(o):
    raise TypeError(f"Object of type {type(o).__name__} is not JSON serializable")


def _encode_fast(obj):
    """encoder.encode(obj), the same bytes, about twice as fast."""
    if _make_encoder is None:
        return encoder.encode(obj)
    encode = _make_encoder({}, _not_json, _encode_str, None, ":", ",", False, False, False)
    return "".join(encode(obj, 0))


encode = _encode_fast


def encode_request(name, args):
    """The request {"tool": name, "args": args} as UTF-8 bytes."""
    try:
        return _encode_fast({"tool": name, "args": args}).encode("utf-8", "backslashreplace")
    except (TypeError, ValueError) as exc:
        raise TypeError(f"arguments of {name}() must be JSON-encodable: {exc}") from None


def check_of(params):
    """A tool's check from its params ({"names", "required", "open", "positional",
    "keyword_only", "omit_none"}, see keywordCheck in the Host's stubs.go), or None (any
    keywords go): (the names it takes: frozenset, None for any; the names it requires:
    tuple; the order positional arguments bind in: tuple, None when keyword-only; why it
    is keyword-only; the optional names whose None is left out: frozenset)."""
    if params is None:
        return None
    names = None if params.get("open") else frozenset(params.get("names") or ())
    positional = params.get("positional")
    if positional is not None:
        positional = tuple(positional)
    why = params.get("keyword_only") or "its parameters have no known order"
    return (names, tuple(params.get("required") or ()), positional, why,
            frozenset(params.get("omit_none") or ()))


_NO_SCHEMA = (None, (), None, "it has no input schema to give its parameters an order", frozenset())


def _plural(n, word):
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def bind(name, check, args, kwargs):
    """The keyword arguments of the call name(*args, **kwargs) of a tool with check (None:
    any keywords, none positional), as its request carries them: positional arguments
    named in the order of the tool's parameters, optional ones given as None left out.
    Raises TypeError in CPython's words, in CPython's order, for a call the parameters do
    not take: an unexpected keyword, a value given twice, too many positional arguments,
    missing required ones. kwargs may be changed and returned."""
    names, required, positional, why, omit = _NO_SCHEMA if check is None else check
    if args:
        if positional is None:
            raise TypeError(
                f"{name}() takes keyword arguments only, as {why} "
                f"({_plural(len(args), 'positional argument')} given)"
            )
        bound = dict(zip(positional, args))
        for key in kwargs:
            if names is not None and key not in names:
                raise TypeError(f"{name}() got an unexpected keyword argument '{key}'")
            if key in bound:
                raise TypeError(f"{name}() got multiple values for argument '{key}'")
        if len(args) > len(positional):
            most = len(positional)
            least = sum(1 for key in positional if key in required)
            takes = str(most) if least == most else f"from {least} to {most}"
            given = "1 was" if len(args) == 1 else f"{len(args)} were"
            word = "argument" if most == 1 and least == most else "arguments"
            raise TypeError(f"{name}() takes {takes} positional {word} but {given} given")
        bound.update(kwargs)
        kwargs = bound
    elif names is not None:
        for key in kwargs:
            if key not in names:
                raise TypeError(f"{name}() got an unexpected keyword argument '{key}'")
    for key in required:
        if key not in kwargs:
            raise TypeError(_missing(name, required, kwargs, positional))
    if omit:
        for key in [key for key in kwargs if kwargs[key] is None and key in omit]:
            del kwargs[key]
    return kwargs


def _missing(name, required, given, positional):
    """CPython's message for a call without some required arguments."""
    missing = [repr(key) for key in required if key not in given]
    if len(missing) == 1:
        listed = missing[0]
    elif len(missing) == 2:
        listed = f"{missing[0]} and {missing[1]}"
    else:
        listed = ", ".join(missing[:-1]) + ", and " + missing[-1]
    kind = "keyword-only" if positional is None else "positional"
    plural = "argument" if len(missing) == 1 else "arguments"
    return f"{name}() missing {len(missing)} required {kind} {plural}: {listed}"


def accepted(name, args):
    """The request's keyword arguments for a call of the tool name with the keyword
    arguments args (a dict, not changed), or None when the call raises TypeError before
    any request."""
    try:
        return bind(name, keywords.get(name), (), dict(args))
    except TypeError:
        return None
