"""What the sync and the asyncio clients share: a run's request, a pause's
tool calls answered, a run's answer as a Result."""

import asyncio
import base64
import dataclasses
import enum
import json
import logging

from .tools import as_tools

logger = logging.getLogger("spine_client")

# How many times a continuation (tool results, decisions on approvals)
# refused with 429 overloaded (every run slot busy: the run waits) or 503
# closed (its replica drains: with --session-store another continues the
# run) is sent again by default, Retry-After apart (the TypeScript client's
# default too).
RESULT_RETRIES = 60

# The longest wait between two sendings, whatever Retry-After says.
MAX_RETRY_AFTER = 30.0

# How many times one continuation follows its run to the id it continues
# as (moved_to): a run taken over again and again by replicas that died
# before they answered.
MAX_HOPS = 8


def retry_wait(retry_after):
    """The seconds to wait before sending refused results again: Retry-After
    within [0, MAX_RETRY_AFTER] (a negative one is 0, an infinite one the
    most), 1 without one."""
    if retry_after is None or retry_after != retry_after:  # absent, or NaN
        return 1.0
    return min(max(float(retry_after), 0.0), MAX_RETRY_AFTER)


def sent_again(e):
    """Whether a continuation refused with the SpineError e is sent again,
    the same, after Retry-After: 429 overloaded (every run slot busy: the
    run waits) or 503 closed (the replica drains; with --session-store it
    handed the run over, and the next replica the request reaches continues
    it)."""
    return (e.status, e.kind) in ((429, "overloaded"), (503, "closed"))


def moved_to(e, run_id):
    """The run id a continuation of run run_id refused with the SpineError
    e is sent to, the same, at once: with --session-store, 409 conflict
    naming another run_id (another replica took the run over and continues
    it under that id; its answer did not reach the client); else None."""
    new = e.response.get("run_id") if isinstance(e.response, dict) else None
    if e.status == 409 and e.kind == "conflict" and isinstance(new, str) and new and new != run_id:
        return new
    return None


def run_body(source, tools, inputs, files, timeout, early_reads):
    """The body of a run request, and its tools by name."""
    if not isinstance(source, str):
        raise TypeError("source must be a str, not %s" % type(source).__name__)
    body = {"source": source}
    if inputs is not None:
        if not isinstance(inputs, dict):
            raise TypeError("inputs must be a dict, not %s" % type(inputs).__name__)
        body["inputs"] = inputs
    if timeout is not None:
        if timeout <= 0:
            raise ValueError("timeout must be positive seconds, not %r" % (timeout,))
        body["timeout_ms"] = max(1, int(round(timeout * 1000)))
    if files:
        body["files"] = [{"name": name, "data": base64.b64encode(_bytes(name, data)).decode("ascii")}
                         for name, data in files.items()]
    by_name = as_tools(tools)
    if by_name:
        body["tools"] = [t.definition() for t in by_name.values()]
    if early_reads is None:
        early_reads = any(t.read_only for t in by_name.values())
    if early_reads:
        body["early_reads"] = True
    return body, by_name


def _bytes(name, data):
    if isinstance(data, str):
        return data.encode("utf-8")
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    raise TypeError("files[%r] must be bytes or str, not %s" % (name, type(data).__name__))


def _default(value):
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (set, frozenset)):
        return list(value)
    raise TypeError("a value of type %s has no JSON form" % type(value).__name__)


def value_result(call_id, value):
    """The result of a call that returned value, or its error when the value
    has no JSON form."""
    try:
        value = json.loads(json.dumps(value, default=_default, allow_nan=False))
    except (TypeError, ValueError) as e:
        return error_result(call_id, TypeError("the tool's value cannot be sent: %s" % e))
    return {"id": call_id, "value": value}


def error_result(call_id, exc):
    """The result of a call that raised exc: it raises in the program, a
    RuntimeError "Type: message"."""
    message = str(exc) or type(exc).__name__
    return {"id": call_id, "error": {"message": message, "type": type(exc).__name__}}


def _unknown(call):
    return error_result(call.get("id"), LookupError("the client has no tool %r" % call.get("name")))


def call_sync(tool, call):
    """Calls a tool that is a plain function; its result."""
    try:
        args, kwargs = tool.bind(call.get("arguments") or {})
        return value_result(call["id"], tool.fn(*args, **kwargs))
    except Exception as e:
        logger.debug("tool %s raised", tool.name, exc_info=True)
        return error_result(call["id"], e)


async def call_async(tool, call):
    """Calls a tool, awaiting it when it is a coroutine function."""
    try:
        args, kwargs = tool.bind(call.get("arguments") or {})
        value = tool.fn(*args, **kwargs)
        if tool.is_async or asyncio.iscoroutine(value):
            value = await value
        return value_result(call["id"], value)
    except Exception as e:
        logger.debug("tool %s raised", tool.name, exc_info=True)
        return error_result(call["id"], e)


def answer_sync(tools, pending):
    """The results of a pause's calls, for the sync client: plain functions
    are called in order; coroutine functions are awaited together, on an
    event loop of their own."""
    results = [None] * len(pending)
    later = []
    for i, call in enumerate(pending):
        tool = tools.get(call.get("name"))
        if tool is None:
            results[i] = _unknown(call)
        elif tool.is_async:
            later.append((i, tool, call))
        else:
            results[i] = call_sync(tool, call)
    if later:
        try:
            asyncio.get_running_loop()
            running = True
        except RuntimeError:
            running = False
        if running:
            err = RuntimeError("an async tool called by the sync Client inside a running event loop: use AsyncClient")
            for i, tool, call in later:
                results[i] = error_result(call["id"], err)
        else:
            async def gather():
                return await asyncio.gather(*(call_async(tool, call) for _, tool, call in later))

            for (i, _, _), res in zip(later, asyncio.run(gather())):
                results[i] = res
    return results


async def answer_async(tools, pending):
    """The results of a pause's calls, for the asyncio client: coroutine
    functions are awaited together; a plain function runs on the event
    loop's thread when its turn comes."""

    async def one(call):
        tool = tools.get(call.get("name"))
        return _unknown(call) if tool is None else await call_async(tool, call)

    return list(await asyncio.gather(*(one(call) for call in pending)))


class Result:
    """A run that ended normally.

    value is the program's last expression as JSON (None when it has no
    faithful JSON form: display["text/plain"] still shows it); display its
    formats by MIME type; stdout, stderr; tool_calls the number of tool
    calls the program made and calls each one's record; files what the
    program created or changed in its working directory, name to bytes;
    pauses how many times the run waited for the client's tools or its
    decision on an approval (each one round trip); run_id the run's id
    when it had client tools or could wait for approvals (the last answer's:
    with --session-store a run another replica took over has a new one);
    raw the server's whole answer.
    """

    def __init__(self, answer, pauses=0):
        self.raw = answer
        self.value = answer.get("value")
        self.display = answer.get("display") or {}
        self.displayed = answer.get("displayed") or []
        self.stdout = answer.get("stdout", "")
        self.stderr = answer.get("stderr", "")
        self.tool_calls = answer.get("tool_calls", 0)
        self.calls = answer.get("calls") or []
        self.files = {f["name"]: base64.b64decode(f.get("data") or "") for f in answer.get("files") or []}
        self.timing = answer.get("timing") or {}
        self.run_id = answer.get("run_id")
        self.pauses = pauses

    @property
    def text(self):
        """The value as a notebook's Out[ ] shows it ("" for None)."""
        return self.display.get("text/plain", "")

    def __repr__(self):
        return "Result(value=%r, stdout=%r, tool_calls=%d, pauses=%d)" % (self.value, self.stdout, self.tool_calls, self.pauses)
