"""The program's world inside the Guest, beyond its tools (docs/python.md).

The Guest has no threads, no network and nothing an event loop could wait on but time.
This module makes the modules programs reach for behave as natively within that world:

- ``asyncio``: the event loop is ``GuestEventLoop``, a selector loop with no self-pipe (no
  socket pair) whose selector only sleeps, and which fails with a clear error when nothing
  is ready, no timer is set and so nothing can ever happen (natively: a hang). It is
  asyncio's default, through the default policy's loop factory.
- executors (``concurrent.futures.ThreadPoolExecutor``, the Guest's own, which asyncio's
  ``to_thread`` and ``run_in_executor`` use): ``start`` starts the call of an early-read
  tool, or of a function that only forwards to one (``_forwarder``), on the Host at once
  (``plm.futures.start``), so the calls a program hands to an executor run in parallel;
  anything else runs to its end when it is handed over.
- ``threading``: ``Thread.start`` runs the thread's target to its end at once.
- ``socket``: every way to a socket or a name lookup raises OSError (errno ENETUNREACH)
  saying there is no network in the sandbox.

Each module is fixed when it is imported, at image time or by the program: a finder at
the head of ``sys.meta_path`` (``_FixUps``) wraps its loader, and modules imported before
this one are fixed when this one is.
"""

import dis
import errno
import functools
import io
import sys
import time
import types
from contextvars import Context
from os import urandom as _urandom

from plm import futures, wire
from plm.purity import _key_cache, _keys_scalar

__all__ = ["know_tools", "start", "settle", "find_generators", "reseed", "NO_NETWORK", "DEADLOCK"]

NO_NETWORK = "no network in the sandbox: a program reaches the world only through its tools"
DEADLOCK = (
    "the event loop has nothing to run and nothing to wait for (no task is ready, no timer "
    "is set): the program would wait forever"
)

# Executors --------------------------------------------------------------------

_tool_names = {}  # tool proxy -> the tool's name
_early = frozenset()  # the tools with early reads allowed
_decode = None  # bootstrap.decode: a response's bytes to the tool's value
_namespace_type = None  # bootstrap.Namespace: what holds a dotted tool name's parts


def know_tools(proxies_by_name, early, decode, namespace_type):
    """Learn the tool proxies (by full name), the early-read tools' names, how a response
    is decoded and the type of a tool namespace; bootstrap calls this when it installs
    the tools."""
    global _early, _decode, _namespace_type
    _tool_names.clear()
    for name, proxy in proxies_by_name.items():
        _tool_names[proxy] = name
    _early = frozenset(early)
    _decode = decode
    _namespace_type = namespace_type


def _unwrap(fn, args, kwargs):
    """The function a submitted callable calls, and its arguments: functools.partial and
    asyncio.to_thread's Context.run taken off (exact types only, so no code of the program
    runs)."""
    for _ in range(8):
        if type(fn) is functools.partial:
            args = fn.args + args
            if fn.keywords:
                kwargs = {**fn.keywords, **kwargs}
            fn = fn.func
        elif (type(fn) is types.BuiltinMethodType and type(fn.__self__) is Context
              and fn.__name__ == "run" and args):
            fn, args = args[0], args[1:]
        else:
            break
    return fn, args, kwargs


# A forwarder's code may not take *args or **kwargs (CO_VARARGS, CO_VARKEYWORDS), nor be
# a generator or a coroutine (CO_GENERATOR, CO_COROUTINE, CO_ITERABLE_COROUTINE,
# CO_ASYNC_GENERATOR).
_NOT_FORWARDER = 0x04 | 0x08 | 0x20 | 0x80 | 0x100 | 0x200
_MISSING = object()


def _get(mapping, name):
    """mapping[name], or _MISSING, without running any code of the program: the lookup is
    made only in an exact dict whose keys are all exact scalars (_keys_scalar; a key of
    another type could run its own __eq__ when its hash collides with name's)."""
    if type(mapping) is not dict or not _keys_scalar(mapping):
        raise LookupError(name)
    return dict.get(mapping, name, _MISSING)


def _forwarder(fn, args):
    """When the whole body of the function fn is one call of a tool with arguments that
    are fn's parameters, constants, globals or closure variables (``lambda k: read(k)``,
    ``def get(k): return db.read(key=k, limit=5)``), the proxy that fn(*args) calls and
    its positional and keyword arguments; otherwise None.

    fn's bytecode is read, never run, and every name is looked up without running code
    of the program (_get), so what fn(*args) would call, and with what, is known exactly:
    the same proxy and values fn finds when it runs now, as it would in the caller."""
    _key_cache.clear()  # _keys_scalar's answers hold for this look at fn only
    code = fn.__code__
    if (code.co_flags & _NOT_FORWARDER or code.co_kwonlyargcount or code.co_cellvars
            or len(args) != code.co_argcount):
        return None
    closure = fn.__closure__ or ()
    stack = []
    kw_names = ()
    instructions = list(dis.get_instructions(code))
    for at, ins in enumerate(instructions):
        op = ins.opname
        if op in ("RESUME", "NOP", "EXTENDED_ARG", "COPY_FREE_VARS", "PRECALL"):
            continue
        if op == "PUSH_NULL":
            stack.append(_MISSING)
        elif op == "LOAD_FAST":
            index = code.co_varnames.index(ins.argval)
            if index >= code.co_argcount:
                return None
            stack.append(args[index])
        elif op == "LOAD_CONST":
            stack.append(ins.argval)
        elif op == "LOAD_GLOBAL":
            value = _get(fn.__globals__, ins.argval)
            if value is _MISSING:
                value = _get(fn.__builtins__, ins.argval)
                if value is _MISSING:
                    return None
            if ins.arg & 1:
                stack.append(_MISSING)
            stack.append(value)
        elif op == "LOAD_DEREF":
            index = code.co_freevars.index(ins.argval)
            try:
                stack.append(closure[index].cell_contents)
            except ValueError:  # an empty cell
                return None
        elif op == "LOAD_METHOD":
            if not stack or type(stack[-1]) is not _namespace_type:
                return None
            value = _get(object.__getattribute__(stack.pop(), "__dict__"), ins.argval)
            if value is _MISSING:
                return None
            stack += [_MISSING, value]
        elif op == "KW_NAMES":
            kw_names = code.co_consts[ins.arg]
        elif op == "CALL":
            rest = instructions[at + 1:]
            if (len(rest) != 1 or rest[0].opname != "RETURN_VALUE"
                    or len(stack) != ins.arg + 2 or stack[0] is not _MISSING):
                return None
            given = stack[2:]
            npos = len(given) - len(kw_names)
            return stack[1], tuple(given[:npos]), dict(zip(kw_names, given[npos:]))
        else:
            return None
    return None


def start(fn, args, kwargs, deliver):
    """Start fn(*args, **kwargs) on the Host now when fn is an early-read tool called with
    plain-data keyword arguments, or a function that only forwards its arguments to such a
    call (_forwarder), and the Host agrees. deliver(value, exc) gets the outcome when the
    call is claimed (settle). Returns a token for settle, or None: then the caller makes
    the call itself."""
    fn, args, kwargs = _unwrap(fn, args, kwargs)
    if not _early or type(fn) is not types.FunctionType:  # a proxy is a function
        return None
    name = _tool_names.get(fn)  # a function hashes by identity: no code of the program runs
    if name is None and not kwargs:
        try:
            forwarded = _forwarder(fn, args)
        except (LookupError, ValueError):
            return None
        if forwarded is None or type(forwarded[0]) is not types.FunctionType:
            return None
        fn, args, kwargs = forwarded
        name = _tool_names.get(fn)
    if name is None or name not in _early:
        return None
    if args:
        try:  # positional arguments named as the proxy names them
            kwargs = wire.bind(name, wire.keywords.get(name), args, dict(kwargs))
        except TypeError:
            return None  # the call raises: the caller makes it

    def on_response(response, exc):
        if exc is None:
            try:
                value = _decode(response)
            except Exception as error:
                exc = error
            else:
                deliver(value, None)
                return
        deliver(None, exc)

    return on_response if futures.start(name, dict(kwargs), on_response) else None


def settle(token):
    """Claim the started calls up to the one of token (see plm.futures.settle)."""
    futures.settle(token)


# threading ----------------------------------------------------------------------


def _thread_start(self):
    """Start the thread. The Guest has no threads: the thread runs to its end now, in the
    caller, and an exception it raises goes to threading.excepthook as natively."""
    if not self._initialized:
        raise RuntimeError("thread.__init__() not called")
    if self._started.is_set():
        raise RuntimeError("threads can only be started once")
    self._started.set()
    try:
        self.run()
    except KeyboardInterrupt:  # the Host's interrupt, which natively the main thread gets
        raise
    except BaseException:
        self._invoke_excepthook(self)
    finally:
        self._is_stopped = True


def _fix_threading(threading):
    threading.Thread.start = _thread_start


# socket -------------------------------------------------------------------------


def _no_network(*args, **kwargs):
    raise OSError(errno.ENETUNREACH, NO_NETWORK)


def _fix_socket(socket):
    def no_lookup(*args, **kwargs):
        raise socket.gaierror(errno.ENETUNREACH, NO_NETWORK)

    socket.socket.__init__ = _no_network
    for name in ("socketpair", "fromfd", "fromshare", "create_connection", "create_server"):
        setattr(socket, name, _no_network)
    for name in ("getaddrinfo", "gethostbyname", "gethostbyname_ex", "gethostbyaddr", "getnameinfo"):
        setattr(socket, name, no_lookup)


# asyncio ------------------------------------------------------------------------


def _fix_asyncio(asyncio):
    import selectors
    from types import MappingProxyType

    from asyncio import selector_events

    class _Selector(selectors.BaseSelector):
        """Waits for time only: the Guest has no file or socket to wait on."""

        def register(self, fileobj, events, data=None):
            raise OSError(errno.ENOTSUP, "the Guest's event loop cannot wait for files or sockets")

        def unregister(self, fileobj):
            raise KeyError(fileobj)

        def select(self, timeout=None):
            if timeout is None:
                raise RuntimeError(DEADLOCK)
            if timeout > 0:
                time.sleep(timeout)  # the Host's sleep, which ends with the run
            return []

        def close(self):
            pass

        def get_map(self):
            return MappingProxyType({})

    class GuestEventLoop(selector_events.BaseSelectorEventLoop):
        """asyncio's selector event loop for the Guest: no self-pipe (nothing but this
        loop's own thread can add work to it), a selector that waits for time only."""

        def __init__(self, selector=None):
            super().__init__(_Selector() if selector is None else selector)

        def _make_self_pipe(self):
            pass

        def _close_self_pipe(self):
            pass

        def _write_to_self(self):
            pass

    GuestEventLoop.__module__ = "asyncio"
    asyncio.DefaultEventLoopPolicy._loop_factory = GuestEventLoop
    asyncio.SelectorEventLoop = GuestEventLoop
    for name in ("unix_events", "windows_events"):
        events = sys.modules.get("asyncio." + name)
        if events is not None and hasattr(events, "SelectorEventLoop"):
            events.SelectorEventLoop = GuestEventLoop


# zoneinfo -------------------------------------------------------------------------


def _fix_zoneinfo(common):
    """zoneinfo reads a zone it finds in no folder of its TZPATH (the Guest has none) from
    the tzdata package in the standard library's zip, through importlib.resources, which
    reads the zip's whole directory again for every zone (tens of milliseconds a zone, in
    every run). The zip's loader keeps that directory, read when the image was made, so
    this load_tzdata reads the zone's file through it: the same bytes. A key it cannot
    read that way (no such zone, a folder) goes the original way, which fails as natively."""
    original = common.load_tzdata

    def load_tzdata(key):
        try:
            key.encode("utf-8")
            import tzdata

            data = tzdata.__spec__.loader.get_data(tzdata.__path__[0] + "/zoneinfo/" + key)
        except (ImportError, OSError, UnicodeEncodeError):
            return original(key)
        return io.BytesIO(data)

    load_tzdata.__doc__ = original.__doc__
    common.load_tzdata = load_tzdata


# Randomness -------------------------------------------------------------------------
#
# The image a run starts from is captured with a fixed random source (so every Host makes
# the same bytes under a key), and a generator seeded while it was made would give every
# run the same numbers: random's global Random when a module the warm-up imports uses it
# (--preload random, the data Guest's sympy), numpy's global RandomState, any other Random,
# RandomState or numpy bit generator alive in the image. find_generators, the warm-up's
# last step, lists them; reseed, at the start of every run from the image and of a new
# session, seeds each again from the run's own entropy (WASI's random_get, which the Host
# fills from the system's). A session's later runs, a restored one's included, go on with
# its own sequences. Generators a run creates seed themselves from its entropy.

_generators = ()  # (seed, bits) for each generator alive in the image: seed(an int of bits bits)


def find_generators():
    """List the pseudo-random generators alive in the image (the warm-up calls this last,
    once the modules it preloads are imported)."""
    global _generators
    import gc

    # Each kind's reseeding, cheap enough for every run: a Random from 256 bits (seeding it
    # without an argument reads 2,496 bytes and costs several times as much), numpy's
    # legacy RandomState from 32 (np.random.seed(n)'s kind of seed; without one it builds
    # a SeedSequence, over half a millisecond in the Guest); a bit generator in full.
    kinds = []  # (class, how to reseed an instance of it, bits)
    random = sys.modules.get("random")
    if random is not None:
        kinds.append((random.SystemRandom, None, 0))  # no state of its own: nothing to reseed
        kinds.append((random.Random, lambda g: g.seed, 256))
    np_random = sys.modules.get("numpy.random")
    if np_random is not None:
        kinds.append((np_random.RandomState, lambda g: g.seed, 32))
        # Generators draw from a bit generator, which is reseeded in place: its state from a
        # new one of its class, which seeds itself from the entropy.
        kinds.append((np_random.BitGenerator, lambda g: functools.partial(_reseed_bits, g), 0))
    found = []
    owned = set()  # the bit generators of the RandomStates found: seed() reseeds them
    for obj in gc.get_objects():
        cls = type(obj)
        for kind, reseed, bits in kinds:
            if issubclass(cls, kind):
                if reseed is not None:
                    found.append((obj, reseed(obj), bits))
                    if np_random is not None and cls is np_random.RandomState:
                        owned.add(id(obj._bit_generator))
                break
    _generators = tuple((seed, bits) for obj, seed, bits in found if id(obj) not in owned)


def _reseed_bits(bits, _):
    bits.state = type(bits)().state


def reseed():
    """Seed every generator of the image again from this run's entropy. Never raises."""
    if not _generators:
        return
    entropy = _urandom(32 * len(_generators))
    for i, (seed, bits) in enumerate(_generators):
        try:
            seed(int.from_bytes(entropy[32 * i : 32 * i + bits // 8], "little"))
        except Exception:  # this one keeps its state; the run goes on
            pass


# Fixing modules as they are imported --------------------------------------------

_FIXES = {
    "asyncio": _fix_asyncio,
    "socket": _fix_socket,
    "threading": _fix_threading,
    "zoneinfo._common": _fix_zoneinfo,
}


class _FixingLoader:
    """Loads a module with its own loader, then fixes it; the module keeps its loader."""

    def __init__(self, loader, fix):
        self.loader = loader
        self.fix = fix

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        module.__loader__ = self.loader
        if module.__spec__ is not None:
            module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        self.fix(module)


class _FixUps:
    """The finder at the head of sys.meta_path: finds a module of _FIXES with the finders
    after it and has it fixed once it is loaded."""

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        fix = _FIXES.get(name)
        if fix is None:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is cls or find is None:
                continue
            spec = find(name, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _FixingLoader(spec.loader, fix)
        return spec


for _name, _fix in _FIXES.items():
    if _name in sys.modules:
        _fix(sys.modules[_name])
sys.meta_path.insert(0, _FixUps)
