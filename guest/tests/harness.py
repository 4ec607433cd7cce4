"""A tiny test harness for the Guest's Python, run two ways:

- natively: ``/usr/bin/python3.11 guest/tests/test_plm.py`` (exactly CPython 3.11.2, like
  the Guest); the harness puts guest/python on sys.path and a fake ``_spine`` in sys.modules;
- in the real Guest: tests/plm_test.go runs each guest/tests/test_*.py as a program, passing this
  file's source in ``inputs["harness"]``; the test sets ``result`` to the summary.

Either way a test talks to a ``FakeSpine`` (patched into plm.futures, the Guest's only
user of ``_spine``), so it sees exactly what the Guest sends to the Host: calls, prepares
and resolves.
"""

import contextlib
import io
import json
import sys
import traceback

NATIVE = "bootstrap" not in sys.modules
if NATIVE:  # load the Guest's modules over a fake _spine (and leave no __pycache__ in guest/)
    sys.dont_write_bytecode = True
    import os
    import types

    _here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.join(_here, "..", "python"))
    _stub = types.ModuleType("_spine")
    _stub.MAX_MESSAGE = 1 << 20
    _stub.MAX_ERROR_TEXT = 64 << 10
    _stub.ABI_VERSION = 1
    _stub.compile_program = lambda source, filename: None  # None: bootstrap's Python AST path
    _stub.compile_last = None
    sys.modules["_spine"] = _stub

import bootstrap  # noqa: E402
import plm  # noqa: E402
from plm import futures  # noqa: E402


class FakeSpine:
    """Stands in for the Host: tools are Python functions of the argument dict.

    log records ("call" | "prepare" | "claim" | "resolve-miss", tool, args) in order;
    a prepare runs nothing (the tool runs when claimed: tools honour the early-read
    promise, so when does not matter)."""

    def __init__(self, tools, early=(), cap=64):
        self.tools = tools
        self.early = set(early)
        self.cap = cap
        self.log = []
        self.futures = {}
        self.running = set()  # handles peek says are still running
        self.last = 0

    def _run(self, request):
        req = json.loads(request)
        fn = self.tools.get(req["tool"])
        if fn is None:
            return {"value": None, "error": f"unknown tool: {req['tool']}"}
        try:
            return {"value": fn(req["args"])}
        except Exception as exc:
            return {"value": None, "error": str(exc)}

    def peek(self, handle):
        """A chain asks after a read: the fake's reads are done at once (or, for the
        handles in running, not yet). handle 0 asks for a wake."""
        self.log.append(("peek", None, {"peek": handle}))
        if handle in self.running:
            return None
        prepared = self.futures.get(handle)
        if prepared is None:
            return False
        return json.dumps(self._run(prepared)).encode()

    def call(self, request):
        req = json.loads(request)
        self.log.append(("call", req["tool"], req["args"]))
        return json.dumps(self._run(request)).encode()

    def prepare(self, request):
        req = json.loads(request)
        if req["tool"] not in self.early or len(self.futures) >= self.cap:
            return 0
        self.last += 1
        self.futures[self.last] = bytes(request)
        self.log.append(("prepare", req["tool"], req["args"]))
        return self.last

    def resolve(self, handle, request):
        req = json.loads(request)
        prepared = self.futures.pop(handle, None)
        if prepared is None or prepared != bytes(request):
            self.log.append(("resolve-miss", req["tool"], req["args"]))
            return json.dumps(self._run(request)).encode()
        self.log.append(("claim", req["tool"], req["args"]))
        return json.dumps(self._run(request)).encode()

    def kinds(self, *kinds):
        return [entry for entry in self.log if entry[0] in kinds]

    def calls(self):
        """The calls the program made, claimed or not, in order: what the Host's budget counts."""
        return [(tool, args) for kind, tool, args in self.log if kind in ("call", "claim", "resolve-miss")]


def use(fake):
    """Make the Guest talk to fake."""
    futures._spine = fake
    return fake


def execute(source, tools, early=(), inputs=None, early_reads=True, transformed=False, prefix=False, cap=64, fake=None):
    """Run source through bootstrap.execute against a FakeSpine with these tools (or
    against fake, e.g. the one prefix mode already prepared reads with).
    Returns (response dict, stdout text, fake); the response without the value's display
    (shown.py's, which display_test.go checks), as the pass never changes it."""
    fake = use(fake or FakeSpine(tools, early, cap))
    request = {
        "source": source,
        "filename": "<test>",
        "inputs": inputs or {},
        "tools": [{"name": name, "early": name in fake.early} for name in sorted(tools)],
        "early_reads": early_reads,
        "transformed": transformed,
        "prefix": prefix,
    }
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        response = json.loads(bootstrap.execute(json.dumps(request).encode()))
    response.pop("display", None)
    return response, out.getvalue(), fake


def main(namespace):
    """Run every test_* function of namespace in definition order."""
    tests = [(name, fn) for name, fn in list(namespace.items()) if name.startswith("test_") and callable(fn)]
    passed, failed = [], []
    for name, fn in tests:
        try:
            fn()
        except BaseException as exc:  # an assertion, or anything else
            failed.append({"test": name, "error": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))})
        else:
            passed.append(name)
        finally:
            plm.reset()
    summary = {"passed": passed, "failed": failed}
    if NATIVE:
        for failure in failed:
            print(f"FAIL {failure['test']}\n{failure['error']}")
        print(f"{len(passed)} passed, {len(failed)} failed")
        sys.exit(1 if failed or not passed else 0)
    namespace["result"] = summary
