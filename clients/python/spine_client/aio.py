"""The asyncio client: AsyncClient and AsyncSession, the same API as Client
and Session with coroutines. Requests run on threads of the client's own
(over http.client), max_requests at once; a task cancelled while it waits for
the server closes its connection, so the server stops the run."""

import asyncio
import concurrent.futures
import functools
import os

from ._core import MAX_HOPS, RESULT_RETRIES, Result, answer_async, moved_to, retry_wait, run_body, sent_again
from ._http import Aborter, Transport
from .approvals import decide_async
from .client import DEFAULT_URL, _quote
from .errors import SpineError
from .tools import as_tools

__all__ = ["AsyncClient", "AsyncSession"]

_sleep = asyncio.sleep  # the wait before a continuation is sent again (a test's hook)


class AsyncClient:
    """The asyncio twin of Client. Tools may be coroutine functions (the
    calls of one pause are awaited together) or plain functions (called on
    the event loop's thread: one that blocks blocks the loop; make it a
    coroutine function with asyncio.to_thread inside); so may approve."""

    def __init__(self, base_url=None, token=None, http_timeout=None, max_requests=32, retries=RESULT_RETRIES):
        base_url = base_url or os.environ.get("SPINE_URL") or DEFAULT_URL
        token = token if token is not None else os.environ.get("SPINE_TOKEN") or None
        self.base_url = base_url
        self.retries = retries
        self._http = Transport(base_url, token, http_timeout, max_idle=max_requests)
        # A thread per request waiting for the server: max_requests at once.
        self._pool = concurrent.futures.ThreadPoolExecutor(max_requests, thread_name_prefix="spine-client")

    async def _call(self, fn, *args):
        """fn(*args, aborter=...) on a thread; cancelled, it aborts the
        request."""
        aborter = Aborter()
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(self._pool, functools.partial(fn, *args, aborter=aborter))
        try:
            return await future
        except asyncio.CancelledError:
            aborter.abort()
            raise

    async def _json(self, method, path, payload=None):
        return await self._call(self._http.json, method, path, payload)

    async def _request(self, method, path, body=None, content_type=None):
        status, headers, data = await self._call(self._http.request, method, path, body, content_type)
        return status, headers, data

    async def run(self, source, tools=None, inputs=None, files=None, timeout=None, early_reads=None, approve=None):
        """Client.run, awaited; approve may be a coroutine function."""
        body, by_name = run_body(source, tools, inputs, files, timeout, early_reads)
        return await self._drive("/v1/run", body, by_name, approve)

    async def resume(self, run_id, results, tools=None, approve=None):
        """Client.resume, awaited."""
        return await self._drive_from(await self._send_results(run_id, list(results)), as_tools(tools), approve, 1)

    async def decide(self, run_id, decisions, tools=None, approve=None):
        """Client.decide, awaited."""
        return await self._drive_from(await self._send_decisions(run_id, list(decisions)), as_tools(tools), approve, 1)

    async def _drive(self, path, body, tools, approve):
        return await self._drive_from(await self._json("POST", path, body), tools, approve, 0)

    async def _drive_from(self, answer, tools, approve, pauses):
        """Client._drive_from, awaited."""
        while True:
            status = answer.get("status")
            if status == "tool_calls":
                results = await answer_async(tools, answer.get("pending") or [])
                pauses += 1
                answer = await self._send_results(answer["run_id"], results)
            elif status == "approval_required":
                decisions = await decide_async(approve, answer)
                pauses += 1
                answer = await self._send_decisions(answer["run_id"], decisions)
            else:
                return Result(answer, pauses)

    async def _send_results(self, run_id, results):
        """Client._send_results, awaited."""
        try:
            return await self._continue(run_id, "tool_results", {"results": results})
        except SpineError as e:
            e.results = results
            raise

    async def _send_decisions(self, run_id, decisions):
        """Client._send_decisions, awaited."""
        try:
            return await self._continue(run_id, "approvals", {"approvals": decisions})
        except SpineError as e:
            e.decisions = decisions
            raise

    async def _continue(self, run_id, what, payload):
        """Client._continue, awaited."""
        attempt = hops = 0
        while True:
            path = "/v1/runs/%s/%s" % (_quote(run_id), what)
            try:
                return await self._json("POST", path, payload)
            except SpineError as e:
                new = moved_to(e, run_id)
                if new is not None and hops < MAX_HOPS:
                    run_id, hops = new, hops + 1
                    continue
                if not sent_again(e) or attempt >= self.retries:
                    e.run_id = run_id
                    raise
                wait = retry_wait(e.retry_after)
            await _sleep(wait)
            attempt += 1

    async def session(self):
        """A new session; use it in an async with block to delete it at the end."""
        answer = await self._json("POST", "/v1/sessions")
        return AsyncSession(self, answer["id"])

    def attach(self, session_id):
        """The session of this id, made before (no request is sent)."""
        return AsyncSession(self, session_id)

    async def restore(self, snapshot, session_id=None):
        """A new session from a snapshot's bytes."""
        path = "/v1/sessions/restore"
        if session_id is not None:
            path += "?id=" + _quote(session_id)
        answer = Transport.decode(*await self._request("POST", path, bytes(snapshot), "application/octet-stream"))
        return AsyncSession(self, answer["id"])

    async def tool_definition(self):
        """GET /v1/tool."""
        return await self._json("GET", "/v1/tool")

    async def health(self):
        """GET /healthz."""
        return await self._json("GET", "/healthz")

    async def aclose(self):
        self._http.close()
        self._pool.shutdown(wait=False)

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.aclose()


class AsyncSession:
    """The asyncio twin of Session."""

    def __init__(self, client, session_id):
        self.client = client
        self.id = session_id

    def _path(self, tail=""):
        return "/v1/sessions/" + _quote(self.id) + tail

    async def run(self, source, tools=None, inputs=None, files=None, timeout=None, early_reads=None, approve=None):
        """Session.run, awaited."""
        body, by_name = run_body(source, tools, inputs, files, timeout, early_reads)
        return await self.client._drive(self._path("/run"), body, by_name, approve)

    async def snapshot(self):
        """The session's state as bytes."""
        status, headers, data = await self.client._request("GET", self._path("/snapshot"))
        if status >= 300:
            Transport.decode(status, headers, data)
        return data

    async def delete(self):
        """Ends the session; a session gone already is no error."""
        try:
            Transport.decode(*await self.client._request("DELETE", self._path()))
        except SpineError as e:
            if e.status != 404:
                raise

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.delete()

    def __repr__(self):
        return "AsyncSession(%r)" % self.id
