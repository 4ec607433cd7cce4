"""A tool request's bytes, and whether a tool takes a request's keywords.

``encode_request`` is the only encoder of tool requests in the Guest, so equal arguments
give equal bytes: a prepared early read is claimed by its request's bytes
(``plm.futures.send``). ``encoder`` is the same JSON encoding, for the run's value and the
execute response.

``keywords`` holds, for each tool whose proxy checks a call's keywords (bootstrap.make_tool),
the names it takes and those it requires; ``fits`` answers whether a call with these
arguments gets past that check. A call that does not raises TypeError before any request, so
no read may be started early for it.
"""

import json

__all__ = ["encoder", "encode_request", "keywords", "fits"]

keywords = {}  # tool name -> (names it takes: frozenset, None for any; names it requires: tuple)

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


def encode_request(name, args):
    """The request {"tool": name, "args": args} as UTF-8 bytes."""
    try:
        return _encode_fast({"tool": name, "args": args}).encode("utf-8", "backslashreplace")
    except (TypeError, ValueError) as exc:
        raise TypeError(f"arguments of {name}() must be JSON-encodable: {exc}") from None


def fits(name, args):
    """Whether the tool name's proxy lets a call with the keyword arguments args (a dict)
    through: no keyword it does not take, none it requires left out."""
    check = keywords.get(name)
    if check is None:
        return True
    names, required = check
    if names is not None:
        for key in args:
            if key not in names:
                return False
    for key in required:
        if key not in args:
            return False
    return True
