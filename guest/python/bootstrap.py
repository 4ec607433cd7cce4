"""The Guest's Python side of Spine: the module the C side imports (init).

The Host calls ``execute`` (through the C export of the same name) with one JSON
request; ``execute`` sets up ``inputs`` and the tool proxies, runs the program
and answers with one JSON response. Tool proxies come from ``make_tool``; a call
goes through ``invoke_tool`` to ``plm.send`` (which claims a prepared early read of
exactly the same request, or calls ``_spine.call``) and back through ``decode``.

With early reads on, ``plm.transform`` inserts the prepares of the PLM pass before
the program runs; ``prefix_begin`` / ``prefix_feed`` (C exports of the same names)
read a program while it streams in (prefix mode, in ``plm``).
"""

# The Guest's Python by job (plm is a package), and what each module imports: an x where
# the row imports the column. Every x is right of the diagonal: no module imports one
# above it, so there is no cycle.
#
#              imports: shown  world  plm  .prefix  .rewrite  .chain  .facts  .futures  .purity  .wire
#   c.f.thread                   x
#   bootstrap             x      x     x                                                           x
#   shown                                                                                          x
#   world                              x                                          x                x
#   plm                                       x         x        x                x        x
#   plm.prefix                                          x        x       x        x        x
#   plm.rewrite                                                  x       x        x        x       x
#   plm.chain                                                                     x        x
#   plm.facts
#   plm.futures                                                                            x       x
#   plm.purity
#   plm.wire
#
#   c.f.thread   concurrent.futures.thread: the Guest's ThreadPoolExecutor (docs/python.md)
#   bootstrap    the Host's entries (execute, prefix_begin, prefix_feed, chain_step), the program's
#                namespace, the tool proxies (make_tool, invoke_tool), errors, responses
#   shown        the run's value as JSON and as a notebook shows it; display()
#   world        the program's world: asyncio's loop, threads, sockets; executor calls on the Host;
#                the image's random generators, seeded again when a run reaches them
#   plm          reset and the warm-up; the names bootstrap uses
#   plm.prefix   prefix mode: the program read while it streams in
#   plm.rewrite  the PLM pass: transform, its plans, run_plans (the __spine_prepare helper)
#   plm.chain    chained reads: started once the values they need arrive (the wake's step)
#   plm.facts    what each statement of a program may bind or change
#   plm.futures  the pending reads; send, the way of every tool call (_spine's call, prepare, resolve)
#   plm.purity   plain data and the evaluator of pure expressions
#   plm.wire     a tool request's bytes

import ast
import builtins
import inspect
import io
import json
import linecache
import sys
import traceback
from types import CodeType, ModuleType

import plm
import shown
import world
from plm import wire
from plm.wire import encode, encode_request, encoder

# As in native CPython, where it is loaded at start-up: _signal gives SIGINT its handler,
# default_int_handler, so that the Host's interrupt (a session's run out of time, see
# docs/sessions.md) raises KeyboardInterrupt in the program. Without it the interrupt
# would be dropped as a signal with no handler.
import _signal  # noqa: F401
# An error's message and traceback are cut to _MAX_ERROR_TEXT characters each.
from _spine import MAX_ERROR_TEXT as _MAX_ERROR_TEXT
from _spine import compile_last as _compile_last
from _spine import compile_program as _compile_program

# _run tells compile_program's answers apart with these, and _request the request's
# object, not with the builtins a program may replace (in a session, for the runs after it).
_type, _tuple, _dict = type, tuple, dict

__all__ = ["make_tool", "invoke_tool", "decode", "execute", "prefix_begin", "prefix_feed", "chain_step", "Namespace"]

_loads = json.loads
# A tool call's own fast path: json's C scanner called directly, without the
# Python layer of json.loads around it.
_scan_once = json.JSONDecoder().scan_once
_DEFAULT_FILENAME = "<agent>"


# The exception classes a response's "type" may name (a refused call is a
# PermissionError, arguments that do not fit the tool a TypeError); any other
# type, or none, raises RuntimeError.
_ERROR_TYPES = {"PermissionError": PermissionError, "TypeError": TypeError}


def decode(raw):
    """Turn a response envelope into the tool's value, or raise its error: as the class
    its "type" names (_ERROR_TYPES), RuntimeError otherwise."""
    try:
        text = raw.decode("utf-8")
        envelope, end = _scan_once(text, 0)
    except (ValueError, StopIteration):
        raise RuntimeError("malformed tool response") from None
    if end != len(text) or not isinstance(envelope, dict):
        raise RuntimeError("malformed tool response")
    error = envelope.get("error")
    if error is not None:
        raise _ERROR_TYPES.get(envelope.get("type"), RuntimeError)(error)
    return envelope.get("value")


def _request(raw):
    """An execute or prefix_begin request's JSON object. The Host's encoder writes UTF-8
    without whitespace around the object, which json's C scanner reads directly. The
    Python layer of json.loads around it (its encoding detection, its regular expression
    for whitespace, three calls) writes to some thirty pages of the image that a run
    leaves alone otherwise, and the reset copies back every page a run wrote to
    (docs/performance.md, "Where an empty run's time goes"). Anything else goes through
    json.loads, which reads what it reads or raises its own error."""
    try:
        text = raw.decode("utf-8")
        request, end = _scan_once(text, 0)
        if end == len(text) and _type(request) is _dict:
            return request
    except (ValueError, StopIteration):
        pass
    return _loads(raw)


def invoke_tool(name, args):
    """Call the Host tool ``name`` with the keyword arguments ``args`` (a dict).

    The call claims an early read prepared for exactly these request bytes, if any."""
    return decode(plm.send(encode_request(name, args)))


_UNCHECKED = object()


def make_tool(*, name, doc=None, params=None, sig=None, check=_UNCHECKED):
    """Return the Python callable for the Host tool ``name``.

    params, when given, is what the tool's input schema says of its parameters (see
    wire.check_of): a call is bound by wire.bind, positional arguments in the order of
    the tool's parameters, and one the parameters do not take raises TypeError in
    CPython's words before any request. None: keyword arguments only, any keywords go.
    sig is the def line of the tool's stub, the signature help(tool) shows; doc its
    docstring. check, when given, is wire.check_of(params), made already."""
    short = name.rpartition(".")[2]
    if check is _UNCHECKED:
        check = wire.check_of(params)
    bind = wire.bind

    def tool(*args, **kwargs):
        return invoke_tool(name, bind(name, check, args, kwargs))

    tool.__name__ = short
    tool.__qualname__ = name
    tool.__module__ = "tools"
    tool.__doc__ = doc
    signature = _stub_signature(sig)
    if signature is not None:
        tool.__signature__ = signature  # what help(tool) and inspect show
    return tool


class _Annotation:
    """An annotation shown as written in the stub (not as a quoted string)."""

    def __init__(self, text):
        self.text = text

    def __repr__(self):
        return self.text


def _stub_signature(sig):
    """The signature of a tool's stub's def line (read when first asked for), or None."""
    if not sig or not sig.startswith("def "):
        return None
    return _StubSignature(sig)


def _parse_stub_signature(sig):
    """The parameters and the return annotation of the def line sig, as inspect has them."""
    empty = inspect.Parameter.empty
    try:
        fn = ast.parse(sig + " ...").body[0]
    except Exception:  # not a def line: no parameters known
        return {}, empty

    def shown(node):  # an annotation or a default, as the stub writes it
        return empty if node is None else _Annotation(ast.unparse(node))

    params = []
    positional = fn.args.args
    defaults = [None] * (len(positional) - len(fn.args.defaults)) + fn.args.defaults
    for arg, value in zip(positional, defaults):
        params.append(inspect.Parameter(arg.arg, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                        default=shown(value), annotation=shown(arg.annotation)))
    for arg, value in zip(fn.args.kwonlyargs, fn.args.kw_defaults):
        params.append(inspect.Parameter(arg.arg, inspect.Parameter.KEYWORD_ONLY,
                                        default=shown(value), annotation=shown(arg.annotation)))
    if fn.args.kwarg is not None:
        params.append(inspect.Parameter(fn.args.kwarg.arg, inspect.Parameter.VAR_KEYWORD,
                                        annotation=shown(fn.args.kwarg.annotation)))
    real = inspect.Signature(params, return_annotation=shown(fn.returns))
    return real.parameters, real.return_annotation


class _StubSignature(inspect.Signature):
    """A tool's signature, what help(tool) and inspect show, read from its stub's def line
    only when first asked for: parsing it costs about half a millisecond in the Guest,
    which a run that brings its own tools would pay for each of them as it starts."""

    __slots__ = ("_sig",)

    def __init__(self, sig):
        self._sig = sig

    def _read(self):
        try:
            return self._parameters, self._return_annotation
        except AttributeError:
            self._parameters, self._return_annotation = _parse_stub_signature(self._sig)
            return self._parameters, self._return_annotation

    @property
    def parameters(self):
        return self._read()[0]

    @property
    def return_annotation(self):
        return self._read()[1]


class Namespace:
    """Holds the tools under a dotted prefix: ``market.get_price``."""

    def __init__(self, name):
        self.__name = name

    def __repr__(self):
        return f"<tool namespace {self.__name}>"

    def __getattr__(self, attr):
        # Only for a name the namespace does not hold: a run's tool whose proxy is not
        # made yet (_lazy_tools), or say which it does hold.
        held = object.__getattribute__(self, "__dict__")
        name = held.get("_Namespace__name", "tools")
        if attr.startswith("__"):
            raise AttributeError(f"module '{name}' has no attribute '{attr}'")
        full = name + "." + attr
        if full in _lazy_tools:
            return _make_lazy_tool(self, full)
        tools = _tool_attrs(name)
        listed = ", ".join(key for key, value in held.items() if type(value) is Namespace or key in tools)
        lazy = sorted(tool for tool in tools if tool not in held)
        listed = ", ".join(([listed] if listed else []) + lazy)
        raise AttributeError(f"module '{name}' has no tool '{attr}'; its tools are: {listed or 'none'}")

    def __dir__(self):
        held = object.__getattribute__(self, "__dict__")
        return sorted(set(object.__dir__(self)) | _tool_attrs(held.get("_Namespace__name", "tools")))


def _tool_attrs(space):
    """The names under which the namespace space (its dotted name) holds a tool's proxy,
    or will (_lazy_tools)."""
    prefix = space + "."
    return {name[len(prefix):] for names in (_proxies_by_name, _lazy_tools) for name in names
            if name.startswith(prefix) and "." not in name[len(prefix):]}


# Every tool's proxy by its full name, as installed.
_proxies_by_name = {}
# The full names of the run's own tools given by name alone (the request's lazy_tools,
# the Host's guestRunTools: those under a namespace that are not early reads): each
# one's proxy is made when the program first reaches it (Namespace.__getattr__), from
# what the Host answers then.
# Decoding every tool's stub and schema and making every proxy as a run starts would cost
# most of a millisecond for 20 tools, and most runs use few of them.
_lazy_tools = set()


def _make_lazy_tool(space, name):
    """The proxy of the run's tool name (one of _lazy_tools), held by the namespace space
    from now on: its signature, documentation and parameters asked of the Host."""
    spec = invoke_tool("__tools__.proxy", {"name": name})
    _lazy_tools.discard(name)
    params = spec.get("params")
    check = wire.check_of(params)
    proxy = make_tool(name=name, doc=spec.get("doc"), sig=spec.get("sig"), check=check)
    if check is not None:
        wire.keywords[name] = check
    _proxies_by_name[name] = proxy
    setattr(space, name.rpartition(".")[2], proxy)
    world.know_tool(proxy, name)
    return proxy


def _install_tools(namespace, tools):
    for spec in tools:
        name = spec["name"]
        parts = name.split(".")
        target = _namespace_for(namespace, parts[:-1])
        params = spec.get("params")
        check = wire.check_of(params)
        proxy = make_tool(name=name, doc=spec.get("doc"), sig=spec.get("sig"), check=check)
        if check is not None:
            wire.keywords[name] = check
        else:  # not a check of a tool of this name before (prefix_begin's, a run's)
            wire.keywords.pop(name, None)
        _proxies_by_name[name] = proxy
        if isinstance(target, dict):
            target[parts[-1]] = proxy
        else:
            setattr(target, parts[-1], proxy)


def _namespace_for(namespace, parts):
    """What holds a tool under the namespace parts (a list of names) in namespace (the
    program's globals, a dict): the namespace, made where missing; namespace for none."""
    target = namespace
    prefix = []
    for part in parts:
        prefix.append(part)
        current = target.get(part) if isinstance(target, dict) else getattr(target, part, None)
        if not isinstance(current, Namespace):
            current = Namespace(".".join(prefix))
            if isinstance(target, dict):
                target[part] = current
            else:
                setattr(target, part, current)
        target = current
    return target


# The tools last installed: the proxies by global name, the tool list and the
# early-read names. The Host installs its tools once, in the run its image is
# taken from; every later run copies the proxies from here.
_tools_installed = ({}, [], frozenset())


def _tools(spec_list):
    """The proxies for spec_list (None: those installed last), and the tool list."""
    global _tools_installed
    if spec_list is not None:
        proxies = {}
        wire.keywords.clear()
        _install_tools(proxies, spec_list)
        early = frozenset(spec["name"] for spec in spec_list if spec.get("early"))
        _tools_installed = (proxies, spec_list, early)
        world.know_tools(_proxies_by_name, early, decode, Namespace)
    return _tools_installed


def _copy_namespace(space):
    """A new Namespace holding what space holds, its namespaces copied the same way."""
    copied = Namespace(object.__getattribute__(space, "_Namespace__name"))
    held = object.__getattribute__(copied, "__dict__")
    for key, value in object.__getattribute__(space, "__dict__").items():
        held[key] = _copy_namespace(value) if type(value) is Namespace else value
    return copied


def _run_tools(proxies, early_names, specs, lazy):
    """The proxies and the early-read names of a run that brings tools of its own (the
    Host's Request.Tools): the installed ones and these, for this run alone. specs are
    those the Host sends whole; lazy, {"names", "spaces"}, the names of the others and
    the namespaces holding them, whose proxies are made when the program reaches them
    (_lazy_tools). A namespace these share with installed tools is copied first, so
    that the installed one is left as it was (_drop_run_tools takes the run's tools away
    again where a Guest goes on)."""
    run = dict(proxies)
    spaces = lazy["spaces"] if lazy else ()
    tops = {name.partition(".")[0] for name in spaces}
    tops.update(spec["name"].partition(".")[0] for spec in specs)
    for top in tops.intersection(proxies):
        if type(run[top]) is Namespace:
            run[top] = _copy_namespace(run[top])
    for space in spaces:
        _namespace_for(run, space.split("."))
    if lazy:
        _lazy_tools.update(lazy["names"])
    if not specs:
        return run, early_names
    _install_tools(run, specs)
    early = frozenset(early_names).union(spec["name"] for spec in specs if spec.get("early"))
    world.know_tools(_proxies_by_name, early, decode, Namespace)
    return run, early


def _drop_run_tools(proxies, specs, lazy, namespace, shadowed):
    """Take a run's own tools away where its Guest goes on (a session): from the tools
    known, and from namespace the names the run bound to them, when they still are,
    with what those names held before the run (shadowed) put back."""
    for name in [spec["name"] for spec in specs] + (lazy["names"] if lazy else []):
        _proxies_by_name.pop(name, None)
        wire.keywords.pop(name, None)
    _lazy_tools.clear()
    installed, _, early = _tools_installed
    for name, value in proxies.items():
        if installed.get(name) is value or dict.get(namespace, name) is not value:
            continue
        if name in shadowed:
            namespace[name] = shadowed[name]
        else:
            del namespace[name]
    world.know_tools(_proxies_by_name, early, decode, Namespace)


def _cut(text):
    if len(text) <= _MAX_ERROR_TEXT:
        return text
    return text[: _MAX_ERROR_TEXT - 20] + "... [truncated]"


def _error(kind, message, line=0, trace=""):
    return {
        "type": kind,
        "message": _cut(message),
        "line": line,
        "traceback": _cut(trace),
    }


def _exception_error(exc, filename):
    """Describe an uncaught exception with a traceback into the user's source only."""
    if isinstance(exc, SyntaxError) and exc.filename == filename:
        only = "".join(traceback.format_exception_only(type(exc), exc))
        return _error(type(exc).__name__, exc.msg or str(exc), exc.lineno or 0, only)
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == filename]
    lines = ["Traceback (most recent call last):\n"]
    lines.extend(traceback.format_list(frames))
    lines.extend(traceback.format_exception_only(type(exc), exc))
    line = frames[-1].lineno if frames else 0
    try:
        message = str(exc)
    except BaseException:
        message = "<exception str() failed>"
    return _error(type(exc).__name__, message, line or 0, "".join(lines))


def _help(*args, **kwargs):
    """help(obj): print the documentation of obj (a tool shows its description)."""
    import pydoc

    if not args and not kwargs:
        print("Call help(obj) on a tool or any object to see its documentation.")
        return
    pydoc.Helper(output=sys.stdout)(*args, **kwargs)


class _Quitter:
    """exit() and quit(): end the program (code 0 or None is a normal end)."""

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return f"Use {self.name}() to end the program"

    def __call__(self, code=None):
        raise SystemExit(code)


# What the site module would add to builtins; the Guest starts without site.
builtins.help = _help
builtins.exit = _Quitter("exit")
builtins.quit = _Quitter("quit")


class _ToolIndex:
    """The program's tools, to find the one it needs: tools.search("words") lists those
    whose name or description has the words, best first, each as {"name", "description"}
    (the description's first line); tools.search() lists them all. tools.describe(name)
    returns a tool's stub, its signature and documentation as Python (print it). Both are
    answered by the Host. A tool or a global of the program named tools hides this one."""

    __slots__ = ()

    def search(self, query="", limit=10):
        if type(query) is not str:
            raise TypeError(f"tools.search() query must be a str, not {type(query).__name__}")
        if type(limit) is not int:
            raise TypeError(f"tools.search() limit must be an int, not {type(limit).__name__}")
        return invoke_tool("__tools__.search", {"query": query, "limit": limit})

    def describe(self, name):
        if type(name) is not str:
            # A tool's proxy names itself.
            name = getattr(name, "__qualname__", None) if getattr(name, "__module__", None) == "tools" else None
            if type(name) is not str:
                raise TypeError("tools.describe() takes a tool's name (a str) or the tool")
        return invoke_tool("__tools__.describe", {"name": name})

    def __repr__(self):
        return "<tools: tools.search(query), tools.describe(name)>"


builtins.tools = _ToolIndex()
# The helper the PLM pass's prepare statements call. It is there in every run, early
# reads on or off, so a program sees the same builtins either way.
setattr(builtins, plm.HELPER, plm.run_plans)


def _run(source, filename, namespace, early, rendered):
    """Run the program; return the value of its last top-level expression (or None).

    early: the early-read tools when early reads are on (the PLM pass runs), else empty.
    rendered: a dict that gets "transformed", the source that runs, or None."""
    compiled = None
    if not early and rendered is None:
        # The same steps as below, on the parser's tree in C (guest/c/spine.c). None
        # (an audit hook) or the tree (it may be too deep for C to promise the same
        # outcome) when only this path behaves exactly as it must.
        compiled = _compile_program(source, filename)
        if _type(compiled) is _tuple:
            code, pending = compiled
            exec(code, namespace)
            if pending is None:
                return None
            last = _compile_last(pending)
            if _type(last) is not CodeType:  # an ast.Expression: an audit hook, or a lower recursion limit
                last = compile(last, filename, "eval")
            return eval(last, namespace)
    tree = compile(source, filename, "exec", ast.PyCF_ONLY_AST) if compiled is None else compiled
    if early:
        tree = plm.transform(tree, source, filename, early, namespace)
    if rendered is not None:
        _render(tree, rendered)
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = tree.body.pop()
    code = plm.materialize(tree, filename) if early else None
    if code is None:
        # No prepares (none inserted, or the pass gave up on them): the program as it
        # was written, compiled here as with early reads off (the same frame, so the
        # same depth reached), from the tree already parsed (its warnings shown once).
        code = compile(tree, filename, "exec")
        if rendered is not None and early:  # without the prepares it may have shown
            _render(ast.Module(body=tree.body + ([last] if last else []), type_ignores=[]), rendered)
    exec(code, namespace)
    if last is not None:
        return eval(compile(ast.Expression(last.value), filename, "eval"), namespace)
    return None


def _render(tree, rendered):
    """Put the source of tree in rendered["transformed"], unless it cannot be rendered."""
    try:
        rendered["transformed"] = ast.unparse(tree)
    except Exception:
        pass


def _respond(value_json=None, error=None, extra=None, fields=""):
    """The execute response's bytes; fields: shown.fields(), JSON text after a comma."""
    if error is not None:
        response = {"value": None, "error": error}
        if extra:
            response.update(extra)
        text = encoder.encode(response)
        if fields:
            text = text[:-1] + fields + "}"
    elif extra:
        text = '{"value":' + value_json + fields + "," + encode(extra)[1:]
    else:
        text = '{"value":' + value_json + fields + "}"
    return text.encode("utf-8", "backslashreplace")


def _main_module(proxies):
    """A new module __main__ for a program, its attributes as native CPython gives a
    script's (__file__ is set by each run), with the tools installed in it."""
    main = ModuleType("__main__")
    namespace = main.__dict__
    namespace["__annotations__"] = {}
    namespace["__builtins__"] = builtins
    namespace["__file__"] = _DEFAULT_FILENAME
    namespace["__cached__"] = None
    namespace.update(proxies)
    return main


# A session's module __main__: a session's Guest is never reset, so what one run defines
# is there in the next. None until the session's first run.
_session = None


def _session_main(proxies):
    global _session
    if _session is None:
        _session = _main_module(proxies)
    return _session


def _session_namespace(proxies):
    return _session_main(proxies).__dict__


def _still_tool(namespace, name):
    """Whether name (dotted for a namespaced tool) still reaches its tool's proxy in
    namespace: an earlier run of a session may have rebound it, and then a call of it is
    no call of the tool, so the PLM pass must not prepare it. Asked in every session
    run, early reads on or off, so that whatever a planted key's __eq__ does happens
    the same in both."""
    try:
        parts = name.split(".")
        target = dict.get(namespace, parts[0])
        for part in parts[1:]:
            if type(target) is not Namespace:
                return False
            target = dict.get(object.__getattribute__(target, "__dict__"), part)
        return target is not None and target is _proxies_by_name.get(name)
    except BaseException:
        return False


def _source_lines(source):
    """The program's lines as linecache holds a file's: split where the compiler ends a
    line (\\n, \\r\\n, \\r; not at the other characters str.splitlines takes), each ending
    in a newline, the last one included. traceback places its carets counting that
    newline: without it they land a column to the right."""
    lines = source.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line + "\n" for line in lines]


# The file objects open() makes for writing, exactly (a program's own class is not asked).
_FILE_TYPES = frozenset((io.TextIOWrapper, io.BufferedWriter, io.BufferedRandom))


def _flush_files(namespace):
    """A session's run ends with its files (docs/sessions.md): what the program wrote to
    a file it left open in one of its variables is flushed now, so that the run's files
    hold it and a later run's close() has nothing left to write to a file that is gone."""
    for value in list(dict.values(namespace)):
        if _type(value) in _FILE_TYPES:
            try:
                if not value.closed:
                    value.flush()
            except BaseException:
                pass


def execute(raw):
    """The execute entry: one JSON request in, one JSON response out (both bytes)."""
    try:
        request = _request(raw)
        source = request["source"]
        filename = request.get("filename") or _DEFAULT_FILENAME
        inputs = request.get("inputs")
        proxies, _, early_names = _tools(request.get("tools"))
        run_tools = request.get("extra_tools") or []
        lazy_tools = request.get("lazy_tools")
        if run_tools or lazy_tools:
            proxies, early_names = _run_tools(proxies, early_names, run_tools, lazy_tools)
        result_limit = request.get("result_limit") or (1 << 20)
        early = request.get("early_reads") is True
        rendered = {} if request.get("transformed") is True else None
        prefix = request.get("prefix") is True
        session = request.get("session") is True
    except Exception as exc:  # the Host sent something this Guest does not understand
        plm.reset()
        _lazy_tools.clear()
        return _respond(error=_error("SpineError", f"bad execute request: {exc}"))

    shown.begin(result_limit)
    if not prefix:
        plm.reset()  # prefix mode's prepared reads stay, for this run to claim
    else:
        plm.prefix.reset()  # its values are of no more use, and the program may need the memory
    if not session or _session is None:
        # A run from the image, or a new session: its own random numbers (a session's
        # later runs go on with its sequences). The generators the traps guard are seeded
        # when the run first reaches them; these are the others.
        world.reseed()
    shadowed = {}
    if session:
        main = _session_main(proxies)
        namespace = main.__dict__
        namespace.pop("result", None)  # result is each run's own, as inputs are
        if run_tools or lazy_tools:
            installed = _tools_installed[0]
            for name, value in proxies.items():
                if installed.get(name) is not value:
                    if name in namespace:
                        shadowed[name] = namespace[name]
                    namespace[name] = value
        early_names = [name for name in early_names if _still_tool(namespace, name)]
    else:
        main = _main_module(proxies)
        namespace = main.__dict__
    namespace["inputs"] = {} if inputs is None else inputs
    namespace["__file__"] = filename
    modules = sys.modules
    image_main = modules.get("__main__")
    modules["__main__"] = main
    early_tools = set(early_names) if early else None
    linecache.cache[filename] = (len(source), None, _source_lines(source), filename)
    try:
        try:
            last = _run(source, filename, namespace, early_tools, rendered)
        except SystemExit as exc:
            if exc.code not in (None, 0):
                raise
            last = None
        finally:
            # The program has ended: no chain step may start a read after it.
            plm.chain.reset()
            # The tool calls the program handed to an executor and the Host started
            # are claimed, used or not: each counts as the call it stands for.
            plm.settle()
        value = namespace["result"] if "result" in namespace else last
        value_json = shown.encode_value(value, result_limit)
        return _respond(value_json=value_json, extra=rendered, fields=shown.fields(shown.value_display(value)))
    except BaseException as exc:
        return _respond(error=_exception_error(exc, filename), extra=rendered, fields=shown.fields(None))
    finally:
        plm.reset()
        if not session:
            # The module of a run that has ended is no longer __main__ (a session's stays).
            if image_main is None:
                modules.pop("__main__", None)
            else:
                modules["__main__"] = image_main
        linecache.cache.pop(filename, None)
        if session:
            _flush_files(namespace)
            if run_tools or lazy_tools:
                _drop_run_tools(proxies, run_tools, lazy_tools, namespace, shadowed)
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:
                pass


def prefix_begin(raw):
    """The prefix_begin entry: start reading a streamed program; raw is {"inputs", "tools",
    "early_reads"} (no tools: those installed last). Never raises: 0 is success, a
    negative number an internal failure."""
    try:
        plm.reset()
        request = _request(raw)
        if not request.get("early_reads"):
            return 0
        tools = request.get("tools")
        if tools is None:
            tools = _tools(None)[1]
        if request.get("session") is True:
            namespace = _session_namespace(_tools(None)[0])
            tools = [t for t in tools if not t.get("early") or _still_tool(namespace, t["name"])]
        # The run's own tools are installed when it executes, as they are named here;
        # their checks now, so that prefix mode binds positional arguments and makes
        # requests as their proxies will (_install_tools sets them again).
        extra = request.get("extra_tools") or []
        for spec in extra:
            check = wire.check_of(spec.get("params"))
            if check is not None:
                wire.keywords[spec["name"]] = check
        plm.prefix_begin(request.get("inputs"), tools + extra)
        return 0
    except BaseException:
        return -1


def chain_step():
    """The step the Guest's wake schedules (guest/c/spine.c): advance the running
    program's chained reads. Never raises into the program."""
    try:
        plm.chain_step()
    except Exception:
        pass


def prefix_feed(chunk):
    """The prefix_feed entry: the next chunk of the program's bytes. Never raises: the
    number of reads prepared so far, or a negative number on an internal failure."""
    try:
        return plm.prefix_feed(chunk)
    except BaseException:
        return -1
