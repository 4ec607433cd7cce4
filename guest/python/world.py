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

__all__ = ["know_tools", "know_tool", "start", "settle", "find_generators", "reseed", "NO_NETWORK", "DEADLOCK"]

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


def know_tool(proxy, name):
    """Learn one more tool proxy: a run's own tool, made when the program reached it."""
    _tool_names[proxy] = name


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
# last step, lists them, and each is seeded again from the run's own entropy (WASI's
# random_get, which the Host fills from the system's) before the run can draw from it.
#
# Lazily where that can be guarded: a run that never reaches a generator does not touch
# it, for writing a generator's state (2.5 KB, on pages no other run writes) costs a run
# from the image more than the rest of a tiny program. find_generators arms a trap on
# each generator that a program can reach only through attributes: the generator's class
# (when it can be swapped, as a random.Random's) and every module holding it or one of its
# bound methods become a subclass of their own (the same name) whose first attribute
# access, of any of them, wakes them all (_wake): every class put back, every lazy
# generator seeded. The traps live in the image's memory, so every run from it (and every
# new session) starts armed; a session's later runs, a restored one's included, go on
# with what its earlier runs left. A generator a program could reach some other way (held
# by an object when its class stays, a bound method or a module's function reading one as
# a global, kept outside those modules) is seeded eagerly, by reseed, when the run starts.
# Generators a run creates seed themselves from its entropy.

_lazy = ()  # (seed, bits) for each generator a trap guards: seed(an int of bits bits)
_eager = ()  # (seed, bits) for each other one: reseed seeds them
_armed = ()  # (object, its class) for each object whose class is a trap now
_traps = {}  # a class -> its trap (the subclass whose attribute access wakes), and back


def find_generators():
    """List the pseudo-random generators alive in the image and arm the traps of those
    that can be seeded lazily (the warm-up calls this last, once the modules it preloads
    are imported)."""
    global _lazy, _eager, _armed
    import gc

    # Each kind's seeding, cheap enough for every run: a Random from 256 bits (seeding it
    # without an argument reads 2,496 bytes and costs several times as much), numpy's
    # legacy RandomState from 32 (np.random.seed(n)'s kind of seed; without one it builds
    # a SeedSequence, over half a millisecond in the Guest); a bit generator's state set
    # from 256 bits (_seed_bits).
    kinds = []  # (class, how to seed an instance of it, bits)
    random = sys.modules.get("random")
    if random is not None:
        kinds.append((random.SystemRandom, None, 0))  # no state of its own: nothing to seed
        kinds.append((random.Random, lambda g: g.seed, 256))
    np_random = sys.modules.get("numpy.random")
    if np_random is not None:
        kinds.append((np_random.RandomState, lambda g: g.seed, 32))
        # Generators draw from a bit generator, which is seeded in place.
        kinds.append((np_random.BitGenerator, lambda g: functools.partial(_seed_bits, g), 256))
    every = gc.get_objects()
    found, how = [], []  # the generators, and (how to seed each, its bits)
    owned = {}  # id of the bit generator of a RandomState found -> the RandomState
    for obj in every:
        for kind, seed, bits in kinds:
            if issubclass(type(obj), kind):
                if seed is not None:
                    found.append(obj)
                    how.append((seed, bits))
                    if np_random is not None and type(obj) is np_random.RandomState:
                        owned[id(obj._bit_generator)] = obj
                break
    keep = [i for i, obj in enumerate(found) if id(obj) not in owned]  # RandomState.seed seeds those
    found, how = [found[i] for i in keep], [how[i] for i in keep]
    try:
        lazy, guarded = _guarded(found, owned, every)
    except Exception:  # what the collector showed could not be read: every one seeded eagerly
        lazy, guarded = (), []
    del every, owned, obj
    seeds = [(seed(obj), bits) for obj, (seed, bits) in zip(found, how)]
    armed = []
    try:
        for obj in guarded:
            cls = type(obj)
            if cls not in _traps:
                trap = type(cls.__name__, (cls,), {
                    "__slots__": (), "__module__": cls.__module__, "__qualname__": cls.__qualname__,
                    "__getattribute__": _trapped_get, "__setattr__": _trapped_set, "__delattr__": _trapped_del})
                _traps[cls], _traps[trap] = trap, cls
            object.__setattr__(obj, "__class__", _traps[cls])
            armed.append((obj, cls))
    except Exception:  # a class that will not take its trap: every generator seeded eagerly
        for obj, cls in armed:
            object.__setattr__(obj, "__class__", cls)
        armed, lazy = [], ()
    _lazy = tuple(entry for obj, entry in zip(found, seeds) if id(obj) in lazy)
    _eager = tuple(entry for obj, entry in zip(found, seeds) if id(obj) not in lazy)
    _armed = tuple(armed)


def _guarded(generators, owned, every):
    """The generators that can be seeded lazily (their ids), and the objects whose traps
    guard them: each such generator whose class can be swapped, and every module holding
    one of them or one of their bound methods. A generator is lazy when nothing else holds
    it (anything may, when its class is swapped: its own trap guards it), its bound
    methods, its bit generator, or a function that reaches one of those as a global of a
    module holding it (random's _test, numpy.random.mtrand's sample)."""
    by_id = {id(g): g for g in generators}
    handles = {id(g): [g] for g in generators}  # what reaches a generator's state
    for state in owned.values():
        if id(state) in handles:
            handles[id(state)].append(state._bit_generator)
    for obj in every:
        if type(obj) in _METHOD_TYPES:
            owner = by_id.get(id(getattr(obj, "__self__", None)))
            if owner is not None:
                handles[id(owner)].append(obj)
    module_of = {id(m.__dict__): m for m in list(sys.modules.values()) if isinstance(m, types.ModuleType)}
    swappable = {gid: _swappable(type(g)) for gid, g in by_id.items()}
    held = {gid: [] for gid in by_id}  # the modules holding each generator's handles; None: held elsewhere
    ours = {id(every), id(generators), id(owned), id(by_id), id(handles), id(held)}
    _holders(handles, by_id, swappable, module_of, held, ours)
    # A module's own functions reach what it holds as globals, with no attribute of a
    # trapped object on the way when that is a bound method, or a generator whose class
    # stays: those functions are handles too.
    reach = {}  # id of a module's dict -> [(generator id, the names of such handles there)]
    for gid, modules in held.items():
        bypass = {id(h) for h in handles[gid] if not swappable[gid] or type(h) is types.BuiltinMethodType}
        for module in modules or ():
            names = {k for k, v in module.__dict__.items() if id(v) in bypass}
            if names:
                reach.setdefault(id(module.__dict__), []).append((gid, names))
    more = {gid: [] for gid in by_id}
    for obj in every:
        cls = type(obj)
        if cls is types.FunctionType:
            for gid, names in reach.get(id(obj.__globals__), ()):
                if names & _globals_named(obj.__code__):
                    more[gid].append(obj)
        elif cls is types.BuiltinFunctionType and isinstance(obj.__self__, types.ModuleType):
            for gid, _ in reach.get(id(obj.__self__.__dict__), ()):
                more[gid].append(obj)  # compiled: what it names cannot be told
    if any(more.values()):
        ours.add(id(more))
        _holders(more, by_id, swappable, module_of, held, ours)
    lazy, guarded = set(), {}
    for gid, modules in held.items():
        if modules is None:
            continue
        lazy.add(gid)
        for obj in modules + ([by_id[gid]] if swappable[gid] else []):
            guarded[id(obj)] = obj
    return lazy, list(guarded.values())


def _holders(handles, by_id, swappable, module_of, held, ours):
    """Add to held, for each generator (by id), the modules holding its handles (handles:
    generator id -> [handle]); None when something else holds one of them (anything may
    hold a generator whose class is swapped). ours: the ids of the caller's containers."""
    import gc

    owner_of = {id(h): gid for gid, hs in handles.items() for h in hs}
    ours = ours | {id(hs) for hs in handles.values()}
    everything = [h for hs in handles.values() for h in hs]
    ours.add(id(everything))
    for ref in gc.get_referrers(*everything):
        # Ours, a handle (a bound method holds its generator), or held by nothing but this
        # loop (the call's own arguments): no holder.
        if id(ref) in ours or id(ref) in owner_of or sys.getrefcount(ref) <= 3:
            continue
        module = module_of.get(id(ref))
        for target in gc.get_referents(ref):
            gid = owner_of.get(id(target))
            if gid is None or held[gid] is None:
                continue
            if module is not None:
                held[gid].append(module)
            elif not (swappable[gid] and target is by_id[gid]):
                held[gid] = None


def _globals_named(code):
    """The global names code reads, and the code it holds (its functions, lambdas and
    comprehensions)."""
    names = {i.argval for i in dis.get_instructions(code) if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")}
    for const in code.co_consts:
        if type(const) is types.CodeType:
            names |= _globals_named(const)
    return names


_METHOD_TYPES = (types.MethodType, types.BuiltinMethodType)
_HEAPTYPE, _IMMUTABLETYPE = 1 << 9, 1 << 8  # Py_TPFLAGS_*


def _swappable(cls):
    """Whether an object of class cls can take the class of its trap (a subclass without
    slots of its own): a module, or an object of a class defined in Python."""
    return issubclass(cls, types.ModuleType) or (
        cls.__flags__ & _HEAPTYPE != 0 and cls.__flags__ & _IMMUTABLETYPE == 0)


def _wake():
    """A run reached a guarded generator: put every trapped object's class back and seed
    every lazy generator from this run's entropy. Never raises."""
    global _armed
    armed, _armed = _armed, ()
    for obj, cls in armed:
        try:
            object.__setattr__(obj, "__class__", cls)
        except Exception:
            pass
    _seed(_lazy)


def _base(obj):
    """The class of obj before its trap (once awake, its class)."""
    cls = type(obj)
    return _traps.get(cls, cls) if cls.__dict__.get("__getattribute__") is _trapped_get else cls


def _trapped_get(self, name):
    _wake()
    return _base(self).__getattribute__(self, name)


def _trapped_set(self, name, value):
    _wake()
    _base(self).__setattr__(self, name, value)


def _trapped_del(self, name):
    _wake()
    _base(self).__delattr__(self, name)


def _seed_bits(bits, seed):
    """Set the state of the numpy bit generator bits from seed, 256 bits of entropy, as each
    kind's invariants allow: PCG64's and PCG64DXSM's 128-bit state and odd increment;
    MT19937's key as init_by_array makes it from 8 words; Philox's key and counter, 128 bits
    each; SFC64's three words (its counter, the fourth, starting at 1 as when it seeds
    itself); any other kind from a new one of its class (which draws its own entropy)."""
    name = type(bits).__name__
    words = [(seed >> (64 * i)) & 0xFFFFFFFFFFFFFFFF for i in range(4)]
    if name in ("PCG64", "PCG64DXSM"):
        bits.state = {"bit_generator": name, "state": {"state": words[1] << 64 | words[0],
                      "inc": words[3] << 64 | words[2] | 1}, "has_uint32": 0, "uinteger": 0}
        return
    import numpy

    if name == "MT19937":
        bits._legacy_seeding(numpy.frombuffer(seed.to_bytes(32, "little"), dtype=numpy.uint32))
    elif name == "Philox":
        zeros = numpy.zeros(4, dtype=numpy.uint64)
        bits.state = {"bit_generator": name, "state": {"counter": numpy.array(words[2:] + [0, 0], dtype=numpy.uint64),
                      "key": numpy.array(words[:2], dtype=numpy.uint64)}, "buffer": zeros, "buffer_pos": 4,
                      "has_uint32": 0, "uinteger": 0}
    elif name == "SFC64":
        bits.state = {"bit_generator": name, "state": {"state": numpy.array(words[:3] + [1], dtype=numpy.uint64)},
                      "has_uint32": 0, "uinteger": 0}
    else:
        bits.state = type(bits)().state


def _seed(generators):
    if not generators:
        return
    entropy = _urandom(32 * len(generators))
    for i, (seed, bits) in enumerate(generators):
        try:
            seed(int.from_bytes(entropy[32 * i : 32 * i + bits // 8], "little"))
        except Exception:  # this one keeps its state; the run goes on
            pass


def reseed():
    """Seed the generators of the image that no trap guards again from this run's entropy
    (the others are seeded when the run first reaches them). Never raises."""
    _seed(_eager)


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
