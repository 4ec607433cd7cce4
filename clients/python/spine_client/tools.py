"""Tools the caller answers: plain Python functions declared to a run.

A run's program calls a client tool as it calls the server's tools; the run
pauses, the client calls the function with the arguments the program gave,
and sends its return value (or the exception it raised) back. The tool's
JSON Schema comes from the function's signature and type hints, its
description from the docstring's first paragraph, and each argument's from
the docstring's ``Args:`` section (Google style) or ``:param x:`` lines.
"""

import dataclasses
import enum
import inspect
import json
import re
import types
import typing

__all__ = ["Tool", "tool", "as_tools", "schema_of"]

_UnionType = getattr(types, "UnionType", None)  # X | Y, Python 3.10+
_NoneType = type(None)

_SIMPLE = {
    str: {"type": "string"},
    int: {"type": "integer"},
    float: {"type": "number"},
    bool: {"type": "boolean"},
    _NoneType: {"type": "null"},
}


def schema_of(hint):
    """Returns the JSON Schema of a type hint: str, int, float, bool, None,
    list[X], tuple[X, ...], set[X], dict[str, X], Optional[X], Union[...],
    Literal[...], an Enum, a TypedDict or a dataclass; {} (anything) for Any
    or a type it does not know."""
    if hint is inspect.Parameter.empty or hint is typing.Any or hint is object:
        return {}
    if hint is None:
        return {"type": "null"}
    if hint in _SIMPLE:
        return dict(_SIMPLE[hint])
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Union or (_UnionType is not None and origin is _UnionType):
        return _union(args)
    if origin is typing.Literal:
        return {"enum": list(args)}
    if origin is typing.Annotated:
        schema = schema_of(args[0])
        for extra in args[1:]:
            if isinstance(extra, str):
                schema["description"] = extra
        return schema
    if hint in (list, set, frozenset, tuple) or origin in (list, set, frozenset):
        schema = {"type": "array"}
        if args:
            schema["items"] = schema_of(args[0])
        return schema
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return {"type": "array", "items": schema_of(args[0])}
        items = [schema_of(a) for a in args]
        return {"type": "array", "prefixItems": items, "minItems": len(items), "maxItems": len(items)}
    if hint is dict or origin is dict:
        schema = {"type": "object"}
        if len(args) == 2:
            schema["additionalProperties"] = schema_of(args[1])
        return schema
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return {"enum": [m.value for m in hint]}
    if isinstance(hint, type) and _is_typeddict(hint):
        return _typeddict(hint)
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return _dataclass(hint)
    return {}


def _union(args):
    others = [a for a in args if a is not _NoneType]
    if len(others) == len(args) or not others:
        return {"anyOf": [schema_of(a) for a in args]}
    inner = schema_of(others[0]) if len(others) == 1 else _union(tuple(others))
    if set(inner) == {"type"} and isinstance(inner["type"], str):
        return {"type": [inner["type"], "null"]}
    return {"anyOf": [inner, {"type": "null"}]}


def _is_typeddict(cls):
    return issubclass(cls, dict) and hasattr(cls, "__annotations__") and hasattr(cls, "__total__")


def _typeddict(cls):
    hints = typing.get_type_hints(cls)
    props = {name: schema_of(h) for name, h in hints.items()}
    required = sorted(getattr(cls, "__required_keys__", hints.keys() if cls.__total__ else ()))
    schema = {"type": "object", "properties": props}
    if required:
        schema["required"] = required
    return schema


def _dataclass(cls):
    hints = typing.get_type_hints(cls)
    props, required = {}, []
    for f in dataclasses.fields(cls):
        props[f.name] = schema_of(hints.get(f.name, inspect.Parameter.empty))
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            required.append(f.name)
    schema = {"type": "object", "properties": props}
    if required:
        schema["required"] = required
    return schema


_SECTION = re.compile(r"^\s*(Args|Arguments|Parameters|Params|Keyword Args|Keyword Arguments)\s*:\s*$")
_OTHER_SECTION = re.compile(r"^\s*(Returns?|Yields?|Raises|Examples?|Notes?|See Also|Attributes|Warns?)\s*:\s*$")
_ARG_LINE = re.compile(r"^(\s*)\*{0,2}(\w+)\s*(\([^)]*\))?\s*:\s*(.*)$")
_PARAM_LINE = re.compile(r"^\s*:param\s+(?:[\w\[\], ]+\s+)?(\w+)\s*:\s*(.*)$")


def parse_docstring(doc):
    """Returns (description, {argument: description}) from a docstring: its
    first paragraph, and its Google-style Args: section or :param x: lines
    (a line indented under an argument continues it)."""
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    first = []
    for line in lines:
        if not line.strip() or _SECTION.match(line) or _OTHER_SECTION.match(line) or line.lstrip().startswith(":"):
            break
        first.append(line.strip())
    args, current, indent, in_args = {}, None, None, False
    for line in lines:
        stripped = line.strip()
        m = _PARAM_LINE.match(line)
        if m:
            current, indent, in_args = m.group(1), len(line) - len(line.lstrip()), False
            args[current] = m.group(2).strip()
        elif _SECTION.match(line):
            in_args, current, indent = True, None, None
        elif not stripped:
            current = None
        elif _OTHER_SECTION.match(line) or stripped.startswith(":"):
            in_args, current = False, None
        elif current is not None and len(line) - len(line.lstrip()) > indent:
            args[current] = (args[current] + " " + stripped).strip()
        elif in_args:
            m = _ARG_LINE.match(line)
            if m and (indent is None or len(m.group(1)) <= indent):
                current, indent = m.group(2), len(m.group(1))
                args[current] = m.group(4).strip()
        else:
            current = None
    return " ".join(first), args


class Tool:
    """A tool the caller answers: a function and how a run declares it.

    name is how the program calls it (a Python name, dotted for a namespace:
    "crm.search"); description, input_schema and output_schema default to
    what the function's docstring, signature and type hints say. read_only
    tools may be called ahead by the server's early reads, so that a loop of
    reads is one pause of many calls: only for functions without effects.
    """

    def __init__(self, fn, name=None, description=None, read_only=False, input_schema=None, output_schema=None):
        if not callable(fn):
            raise TypeError("a tool must be callable, not %r" % (fn,))
        self.fn = fn
        self.name = name or getattr(fn, "__name__", None)
        if not self.name or self.name == "<lambda>":
            raise ValueError("a tool needs a name: give one (a lambda has none)")
        self.read_only = bool(read_only)
        self.is_async = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None))
        self._signature = inspect.signature(fn)
        doc, arg_docs = parse_docstring(inspect.getdoc(fn))
        self.description = doc if description is None else description
        try:
            hints = typing.get_type_hints(fn, include_extras=True)
        except Exception:  # a hint that names what the module cannot resolve
            hints = getattr(fn, "__annotations__", {}) or {}
        self.input_schema = input_schema if input_schema is not None else self._input_schema(hints, arg_docs)
        if output_schema is None and "return" in hints and hints["return"] is not _NoneType and hints["return"] is not None:
            output_schema = schema_of(hints["return"]) or None
        self.output_schema = output_schema

    def _input_schema(self, hints, arg_docs):
        props, required, extra = {}, [], False
        for p in self._signature.parameters.values():
            if p.kind == p.VAR_POSITIONAL:
                raise TypeError("tool %s: *%s cannot be given by name; a tool's arguments are named" % (self.name, p.name))
            if p.kind == p.VAR_KEYWORD:
                extra = True
                continue
            schema = schema_of(hints.get(p.name, p.annotation))
            if p.name in arg_docs and arg_docs[p.name]:
                schema.setdefault("description", arg_docs[p.name])
            if p.default is p.empty:
                required.append(p.name)
            elif _is_json(p.default):
                schema["default"] = p.default
            props[p.name] = schema
        schema = {"type": "object", "properties": props}
        if required:
            schema["required"] = required
        if not extra:
            schema["additionalProperties"] = False
        return schema

    def definition(self):
        """The tool as a run's "tools" lists it."""
        d = {"name": self.name, "description": self.description, "input_schema": self.input_schema}
        if self.output_schema:
            d["output_schema"] = self.output_schema
        if self.read_only:
            d["read_only"] = True
        return d

    def bind(self, arguments):
        """The (args, kwargs) to call the function with, from the arguments
        the program gave (a JSON object)."""
        if not isinstance(arguments, dict):
            raise TypeError("%s: arguments must be a JSON object, not %s" % (self.name, type(arguments).__name__))
        args, kwargs = [], dict(arguments)
        for p in self._signature.parameters.values():
            if p.kind == p.POSITIONAL_ONLY and p.name in kwargs:
                args.append(kwargs.pop(p.name))
        return args, kwargs

    def __call__(self, *args, **kwargs):
        return self.fn(*args, **kwargs)

    def __repr__(self):
        return "Tool(%r%s)" % (self.name, ", read_only=True" if self.read_only else "")


def _is_json(value):
    try:
        json.dumps(value)
        return True
    except (TypeError, ValueError):
        return False


def tool(fn=None, *, name=None, description=None, read_only=False, input_schema=None, output_schema=None):
    """Makes a function a Tool, as a decorator: ``@tool`` or
    ``@tool(read_only=True, name="shop.price")``."""

    def wrap(f):
        return Tool(f, name=name, description=description, read_only=read_only,
                    input_schema=input_schema, output_schema=output_schema)

    return wrap(fn) if fn is not None else wrap


def as_tools(tools):
    """Returns {name: Tool} from what a run's tools= takes: a dict of names
    to functions or Tools, or a list of functions and Tools (named by their
    own names)."""
    if not tools:
        return {}
    out = {}
    items = tools.items() if isinstance(tools, dict) else ((None, t) for t in tools)
    for name, t in items:
        if isinstance(t, Tool):
            if name is not None and name != t.name:
                t = Tool(t.fn, name=name, description=t.description, read_only=t.read_only,
                         input_schema=t.input_schema, output_schema=t.output_schema)
        else:
            t = Tool(t, name=name)
        if t.name in out:
            raise ValueError("tool %r is given twice" % t.name)
        out[t.name] = t
    return out
