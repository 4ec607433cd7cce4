"""A run's values as a notebook shows them (docs/python.md, "What a run gives back").

- ``encode_value``: the JSON of the run's value. Plain JSON data (what ``json`` encodes) gives
  the bytes it always gave; numpy's numbers and arrays of numbers, strings or such objects,
  sympy's integers, floats and truth values, and sets give the JSON a user expects of them
  (``_convert``); any other value, or one whose JSON is not faithful (NaN, a complex number, a
  DataFrame), has none: ``null``, and its display shows it.
- ``bundle``: a value's formats by MIME type, as IPython's display formatter makes them:
  ``text/plain`` (its ``repr``) always, and ``text/html``, ``text/markdown``, ``text/latex``,
  ``image/png``, ``image/jpeg``, ``image/svg+xml`` and ``application/json`` when the object
  offers them (``_repr_mimebundle_``, ``_repr_html_``, ...). Each is bounded (``_MAX_TEXT``
  characters of ``text/plain``; the run's result limit for a display's formats together).
- ``display``: the builtin, as IPython's: each object's bundle is kept for the run's answer, in
  order, and its ``text/plain`` printed, as IPython's terminal prints it.

The run's state (the displays, the room left for them) is reset by ``begin``, at the start of
every run; ``fields`` writes it, with the value's display, into the execute response.
"""

import builtins
import json
import sys
from binascii import b2a_base64

from plm.wire import encode

_encode_str = json.encoder.encode_basestring  # a str as encoder writes it, in C

__all__ = ["begin", "encode_value", "bundle", "value_display", "fields", "display"]

_MAX_TEXT = 1 << 16  # characters of a display's text/plain
_CUT = "... [truncated]"
# The formats an object may offer through a method of its own, in IPython's order.
_METHODS = (
    ("text/html", "_repr_html_"),
    ("text/markdown", "_repr_markdown_"),
    ("text/latex", "_repr_latex_"),
    ("image/svg+xml", "_repr_svg_"),
    ("image/png", "_repr_png_"),
    ("image/jpeg", "_repr_jpeg_"),
    ("application/json", "_repr_json_"),
)
# Types that offer no format but text/plain: no method is looked up on them.
_PLAIN = frozenset((type(None), bool, int, float, complex, str, bytes, list, tuple, dict, set, frozenset))
_SCALARS = frozenset((bool, int, float, complex, str))
# The attribute IPython asks for to tell an object that claims every name (a proxy, a mock):
# such an object is shown by its repr only.
_CANARY = "_ipython_canary_method_should_not_exist_"

_converting = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"),
                               default=lambda o: _convert(o))


def _convert(o):
    """The plain JSON data o stands for, for the types whose JSON form is faithful; raises
    TypeError for any other."""
    cls = type(o)
    if isinstance(o, (set, frozenset)):
        return list(o)  # JSON has no sets: a list, in the order repr shows them
    np = sys.modules.get("numpy")
    if np is not None:
        if isinstance(o, np.generic):
            if o.dtype.kind in "biuf":  # a bool, an integer, a float: item() is the same number
                v = o.item()
                if type(v) in (bool, int, float):
                    return v
        elif isinstance(o, np.ndarray):
            if o.dtype.kind in "biufUO" and o.size <= _limit:
                return o.tolist()  # nested lists of Python numbers, strings or the objects
    sympy = sys.modules.get("sympy")
    if sympy is not None:
        if isinstance(o, sympy.Integer):
            return int(o)
        if isinstance(o, sympy.Float) and o._prec <= 53:  # as precise as a float: the same number
            return float(o)
        if o is sympy.true or o is sympy.false:
            return o is sympy.true
    raise TypeError(f"Object of type {cls.__name__} is not JSON serializable")


def encode_value(value, limit):
    """The run's value as JSON text: ``null`` when it has no faithful JSON form. A value of
    plain JSON data over limit bytes raises ValueError, as it always did; one converted
    (numpy, sympy, a set) over it has no JSON form: its display shows it."""
    if value is None:
        return "null"
    cls = type(value)
    try:
        if cls is int:  # the same bytes as encode's, without making an encoder
            text = int.__repr__(value)
        elif cls is str:
            text = _encode_str(value)
        else:
            text = encode(value)
    except (TypeError, ValueError):  # ValueError: NaN, a cycle, an int of too many digits
        pass
    else:
        if len(text) > limit:
            raise ValueError(f"the result is larger than the {limit}-byte limit ({len(text)} bytes)")
        return text
    try:
        text = _converting.encode(value)
    except (TypeError, ValueError):
        return "null"
    return text if len(text) <= limit else "null"


def _method(obj, name):
    """obj's method name, as IPython looks it up: none on a class, or on an object that
    claims every attribute."""
    try:
        method = getattr(obj, name, None)
    except Exception:
        return None
    return method if callable(method) else None


def _formatted(mime, data):
    """data, as a format method answered it, as the text of mime; None when it is not one."""
    if type(data) is tuple and len(data) == 2:
        data = data[0]  # (data, metadata)
    if data is None:
        return None
    if mime == "application/json" or mime.endswith("+json"):
        if isinstance(data, str):
            try:
                json.loads(data)
            except ValueError:
                return None
            return data
        try:
            return _converting.encode(data)
        except (TypeError, ValueError):
            return None
    if mime.startswith("image/") and mime != "image/svg+xml":
        if isinstance(data, (bytes, bytearray, memoryview)):
            return b2a_base64(data, newline=False).decode("ascii")
        return data if isinstance(data, str) else None
    return data if isinstance(data, str) else None


def _warn(obj, method, exc):
    """Say on stderr that a format method failed (IPython prints its traceback)."""
    try:
        print(f"{type(obj).__name__}.{method} raised {type(exc).__name__}: {exc}; that format is left out",
              file=sys.stderr)
    except Exception:
        pass


def bundle(obj, include=None, exclude=None):
    """obj's formats by MIME type, text/plain first (not yet bounded: see _bounded)."""
    data = {}
    rich = {}
    if type(obj) not in _PLAIN and not isinstance(obj, type) and _method(obj, _CANARY) is None:
        method = _method(obj, "_repr_mimebundle_")
        if method is not None:
            try:
                got = method(include=include, exclude=exclude)
            except Exception as exc:
                _warn(obj, "_repr_mimebundle_", exc)
                got = None
            if type(got) is tuple and len(got) == 2:
                got = got[0]
            if isinstance(got, dict):
                for mime, value in got.items():
                    if type(mime) is str:
                        text = _formatted(mime, value)
                        if text is not None:
                            rich[mime] = text
        for mime, name in _METHODS:
            if mime in rich:
                continue
            method = _method(obj, name)
            if method is None:
                continue
            try:
                text = _formatted(mime, method())
            except Exception as exc:
                _warn(obj, name, exc)
                continue
            if text is not None:
                rich[mime] = text
    plain = rich.pop("text/plain", None)
    if plain is None:
        try:
            plain = repr(obj)
        except Exception as exc:
            _warn(obj, "__repr__", exc)
            plain = object.__repr__(obj)
    data["text/plain"] = plain
    for mime, text in rich.items():
        if (include is None or mime in include) and (exclude is None or mime not in exclude):
            data[mime] = text
    return data


def _size(text):
    """The bytes text takes in the response."""
    if text.isascii():
        return len(_encode_str(text))
    return len(_encode_str(text).encode("utf-8", "backslashreplace"))


def _bounded(data, room, fit):
    """data bounded to room bytes of the response (with its keys), or None when its
    text/plain does not fit: text/plain cut to _MAX_TEXT characters (fit: and further, to
    the room); the other formats kept whole while they fit, in order, the rest left out."""
    plain = data["text/plain"]
    room -= 20  # the braces, the key "text/plain" and its quotes
    cap = _MAX_TEXT
    if fit:  # a character takes at most 6 bytes in the response (an escape: \u0001)
        cap = min(cap, (room - len(_CUT) * 6) // 6)
    if len(plain) > cap:
        if cap < 0:
            return None
        plain = plain[:cap] + _CUT
    if fit and len(data) == 1:
        return {"text/plain": plain}  # it fits: cap counts 6 bytes a character
    room -= _size(plain)
    if room < 0:
        return None
    kept = {"text/plain": plain}
    for mime, text in data.items():
        if mime == "text/plain":
            continue
        size = _size(mime) + _size(text) + 2
        if size <= room:
            kept[mime] = text
            room -= size
    return kept


# The run's displays ------------------------------------------------------------

_shown = []  # the bundles display() kept this run, in order
_left_out = 0  # the displays left out past the room
_room = 0  # bytes left for the displays' bundles
_limit = 0  # the run's result limit


def begin(limit):
    """Start a run whose value, value's display and displays may each take limit bytes."""
    global _left_out, _room, _limit
    _shown.clear()
    _left_out = 0
    _room = _limit = limit


def value_display(value):
    """The display of the run's value (its Out[ ]), bounded; None for None, as a notebook
    shows nothing for it."""
    if value is None:
        return None
    if type(value) in _SCALARS:  # the common case, quickly: its repr, when it fits
        try:
            text = repr(value)
        except ValueError:  # an int of too many digits: as bundle shows it
            text = None
        if text is not None and len(text) <= _MAX_TEXT and len(text) * 6 + 100 <= _limit:
            return {"text/plain": text}
    return _bounded(bundle(value), _limit, True)


def fields(display):
    """The execute response's fields for the run's value's display and its displays, as
    JSON text that follows a comma; "" when there are none."""
    text = ""
    if display is not None:
        if len(display) == 1:
            text = ',"display":{"text/plain":' + _encode_str(display["text/plain"]) + "}"
        else:
            text = ',"display":' + encode(display)
    if _shown:
        text += ',"displayed":' + encode(_shown)
    if _left_out:
        text += ',"displayed_left_out":' + str(_left_out)
    return text


def display(*objs, include=None, exclude=None, raw=False, **kwargs):
    """Display objs, as in IPython: each one's formats (text/plain, and text/html, image/png
    and the rest when it offers them) are kept with the run's answer, in order, and its
    text/plain printed. raw: objs are bundles already ({mime: data}). Other keywords
    (metadata, display_id, ...) are taken and ignored."""
    global _left_out, _room
    for obj in objs:
        if raw:
            if not isinstance(obj, dict):
                raise TypeError(f"display(raw=True) takes bundles (dicts), not {type(obj).__name__}")
            data = {"text/plain": ""}  # first, and empty unless the bundle has one
            for mime, value in obj.items():
                text = _formatted(mime, value) if type(mime) is str else None
                if text is not None:
                    data[mime] = text
        else:
            data = bundle(obj, include, exclude)
        kept = _bounded(data, _room, False)
        if kept is None:
            _left_out += 1
        else:
            _shown.append(kept)
            _room -= len(encode(kept).encode("utf-8", "backslashreplace")) + 1
        if data["text/plain"] or not raw:
            print(data["text/plain"])


display.__module__ = "builtins"


builtins.display = display
