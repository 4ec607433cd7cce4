"""ThreadPoolExecutor for the Spine Guest, which has no threads (docs/python.md).

It keeps the interface and, for programs that do not depend on preemption, the outcomes of
CPython's: ``submit``, ``map`` (its order, its exceptions and time-out), ``shutdown``, the
context manager, ``max_workers``, ``initializer`` and ``initargs``, and the futures
``as_completed`` and ``wait`` take. What a worker thread would run runs in the caller:

- the call of an early-read tool with plain-data keyword arguments (directly, through
  ``functools.partial``, ``asyncio.to_thread`` or a function that only forwards its
  arguments to it, such as ``lambda k: read(key=k)``) starts on the Host at once, when
  the run allows early reads, and its future is claimed when the program first looks at
  its outcome, so such calls run in parallel (``world.start``);
- anything else runs to its end when it is submitted, its exception kept in its future.

Either way a future is done once ``submit`` returns, as when the calls run one after
another. A future hashes by the order in which its executor made it, so the sets ``wait``
returns, and ``as_completed``, list one executor's futures in an order fixed by it.
"""

import itertools
import os

import world
from concurrent.futures import _base

__all__ = ["ThreadPoolExecutor", "BrokenThreadPool"]


class BrokenThreadPool(_base.BrokenExecutor):
    """Raised when a worker of a ThreadPoolExecutor failed to initialise."""


class _Future(_base.Future):
    """A future done when it is made; the outcome of a call started on the Host is
    claimed when something first reads it."""

    def __init__(self, order):
        self._order = order
        self._token = None  # world.start's token while the outcome is still on the Host
        super().__init__()

    def __hash__(self):
        return self._order

    def _deliver(self, value, exc):
        self._token = None
        self._value = value
        self._error = exc

    def _claim(self):
        token = self._token
        if token is not None:
            world.settle(token)
            if self._token is token:  # the claim was interrupted: the run is ending
                self._deliver(None, RuntimeError("the tool call was not completed: its run ended"))

    def _get_result(self):
        self._claim()
        return self._value

    def _set_result(self, value):
        self._value = value

    def _get_exception(self):
        self._claim()
        return self._error

    def _set_exception(self, exc):
        self._error = exc

    _result = property(_get_result, _set_result)
    _exception = property(_get_exception, _set_exception)


class ThreadPoolExecutor(_base.Executor):
    """An executor whose calls run in the caller, or on the Host for early-read tools."""

    _counter = itertools.count().__next__

    def __init__(self, max_workers=None, thread_name_prefix="", initializer=None, initargs=()):
        if max_workers is None:
            max_workers = min(32, (os.cpu_count() or 1) + 4)
        if max_workers <= 0:
            raise ValueError("max_workers must be greater than 0")
        if initializer is not None and not callable(initializer):
            raise TypeError("initializer must be a callable")
        self._max_workers = max_workers
        self._thread_name_prefix = thread_name_prefix or f"ThreadPoolExecutor-{self._counter()}"
        self._initializer = initializer
        self._initargs = initargs
        self._initialized = False
        self._broken = False
        self._shutdown = False
        self._submitted = 0

    def submit(self, fn, /, *args, **kwargs):
        if self._broken:
            raise BrokenThreadPool(self._broken)
        if self._shutdown:
            raise RuntimeError("cannot schedule new futures after shutdown")
        future = _Future(self._submitted)
        self._submitted += 1
        if not self._initialized and not self._initialize():
            future.set_exception(BrokenThreadPool(self._broken))
            return future
        future.set_running_or_notify_cancel()
        token = world.start(fn, args, kwargs, future._deliver)
        if token is not None:
            future.set_result(None)
            future._token = token
            return future
        try:
            value = fn(*args, **kwargs)
        except KeyboardInterrupt:  # the Host's interrupt, which natively the main thread gets
            raise
        except BaseException as exc:
            future.set_exception(exc)
        else:
            future.set_result(value)
        return future

    submit.__doc__ = _base.Executor.submit.__doc__

    def _initialize(self):
        """Run the initializer, as the first worker would; False when it failed."""
        self._initialized = True
        if self._initializer is None:
            return True
        try:
            self._initializer(*self._initargs)
            return True
        except KeyboardInterrupt:
            raise
        except BaseException:
            _base.LOGGER.critical("Exception in initializer:", exc_info=True)
            self._broken = "A thread initializer failed, the thread pool is not usable anymore"
            return False

    def shutdown(self, wait=True, *, cancel_futures=False):
        self._shutdown = True

    shutdown.__doc__ = _base.Executor.shutdown.__doc__
