"""The sync client: Client and Session."""

import os
import time
import urllib.parse

from ._core import MAX_HOPS, RESULT_RETRIES, Result, answer_sync, moved_to, retry_wait, run_body, sent_again
from ._http import Transport
from .approvals import decide_sync
from .errors import SpineError
from .tools import as_tools

__all__ = ["Client", "Session", "DEFAULT_URL"]

DEFAULT_URL = "http://127.0.0.1:8080"


_sleep = time.sleep  # the wait before a continuation is sent again (a test's hook)


def _quote(segment):
    return urllib.parse.quote(segment, safe="")


class Client:
    """A client of a spine serve: runs programs, answering the tools they
    call with Python functions of this process, and opens sessions.

    base_url defaults to $SPINE_URL, else http://127.0.0.1:8080; token to
    $SPINE_TOKEN (sent as a bearer token); http_timeout is the socket
    timeout in seconds (None: as long as the server takes, which bounds
    every run; TCP keepalive finds a server gone silent within about a
    minute); retries how many times a paused run's tool results or
    decisions refused while every slot of the server is busy (429) or while
    the server drains (503 closed) are sent again, Retry-After apart (at
    most 30 seconds each); one answered 409 naming the id its run continues
    as (another replica took it over) is sent there. Safe to use from several threads; close() (or a
    with block) closes its kept-alive connections.
    """

    def __init__(self, base_url=None, token=None, http_timeout=None, retries=RESULT_RETRIES):
        base_url = base_url or os.environ.get("SPINE_URL") or DEFAULT_URL
        token = token if token is not None else os.environ.get("SPINE_TOKEN") or None
        self.base_url = base_url
        self.retries = retries
        self._http = Transport(base_url, token, http_timeout)

    def run(self, source, tools=None, inputs=None, files=None, timeout=None, early_reads=None, approve=None):
        """Runs source and returns its Result; raises SpineError (ProgramError
        for an uncaught Python exception) when the run does not end normally.

        tools: the tools the program may call beside the server's, answered
        here: a dict of names ("get_weather", "crm.search") to functions or
        Tools, or a list of them. Each time the program waits for one, the
        run pauses; the client calls the functions of every pending call (a
        function that raises sends an error, which raises in the program)
        and sends the results, until the run ends. inputs: the program's
        inputs dict; files: {name: bytes or str} placed in its working
        directory; timeout: its time limit in seconds (its own running, the
        pauses not counted); early_reads: the server's early reads (default:
        on when a tool is read_only, so that a loop of reads is one pause).

        approve: on a server that asks for approvals (spine serve --ask),
        called with each Approval a paused run waits for (its tool,
        arguments, reason), returns True to allow the call, False to refuse
        it, or (allow, reason): refused, the call raises PermissionError in
        the program with reason. Without approve such a pause raises
        ApprovalRequired, its run_id and approvals for decide().
        """
        body, by_name = run_body(source, tools, inputs, files, timeout, early_reads)
        return self._drive("/v1/run", body, by_name, approve)

    def resume(self, run_id, results, tools=None, approve=None):
        """Sends results, the tool results of the paused run run_id (a
        SpineError's run_id and results, when the client gave up sending
        them), and drives the run on as run does, answering its next pauses
        with tools and approve; its Result, whose pauses count the one these
        results answer."""
        return self._drive_from(self._send_results(run_id, list(results)), as_tools(tools), approve, 1)

    def decide(self, run_id, decisions, tools=None, approve=None):
        """Sends decisions on the approvals the paused run run_id waits for
        (an ApprovalRequired's run_id and approvals, decided later: [{"id":
        approval.id, "allow": True or False, "reason": "..."}]), and drives
        the run on as run does, answering its next pauses with tools and
        approve; its Result, whose pauses count the one decided here."""
        return self._drive_from(self._send_decisions(run_id, list(decisions)), as_tools(tools), approve, 1)

    def _drive(self, path, body, tools, approve):
        return self._drive_from(self._http.json("POST", path, body), tools, approve, 0)

    def _drive_from(self, answer, tools, approve, pauses):
        """Answers a run's pauses, each at the run_id its answer names (with
        --session-store a replica that took the run over names a new one),
        until it ends."""
        while True:
            status = answer.get("status")
            if status == "tool_calls":
                results = answer_sync(tools, answer.get("pending") or [])
                pauses += 1
                answer = self._send_results(answer["run_id"], results)
            elif status == "approval_required":
                decisions = decide_sync(approve, answer)
                pauses += 1
                answer = self._send_decisions(answer["run_id"], decisions)
            else:
                return Result(answer, pauses)

    def _send_results(self, run_id, results):
        """POST /v1/runs/{run_id}/tool_results; a SpineError carries run_id
        and results."""
        try:
            return self._continue(run_id, "tool_results", {"results": results})
        except SpineError as e:
            e.results = results
            raise

    def _send_decisions(self, run_id, decisions):
        """POST /v1/runs/{run_id}/approvals; a SpineError carries run_id and
        decisions."""
        try:
            return self._continue(run_id, "approvals", {"approvals": decisions})
        except SpineError as e:
            e.decisions = decisions
            raise

    def _continue(self, run_id, what, payload):
        """POST /v1/runs/{run_id}/{what}, again after Retry-After while the
        server is overloaded or drains (sent_again), at most retries times;
        a SpineError carries run_id. A 409 conflict naming another run_id
        (with --session-store another replica took the run over, and its
        answer was lost: it died before it) is sent to that id at once, at
        most MAX_HOPS times. 421 run_elsewhere and 410 run_lost (the run
        ended with its replica) are not sent again."""
        attempt = hops = 0
        while True:
            path = "/v1/runs/%s/%s" % (_quote(run_id), what)
            try:
                return self._http.json("POST", path, payload)
            except SpineError as e:
                new = moved_to(e, run_id)
                if new is not None and hops < MAX_HOPS:
                    run_id, hops = new, hops + 1
                    continue
                if not sent_again(e) or attempt >= self.retries:
                    e.run_id = run_id
                    raise
                wait = retry_wait(e.retry_after)
            _sleep(wait)
            attempt += 1

    def session(self):
        """A new session (POST /v1/sessions): its runs keep what each
        defines for the next. Use it in a with block to delete it at the end."""
        answer = self._http.json("POST", "/v1/sessions")
        return Session(self, answer["id"])

    def attach(self, session_id):
        """The session of this id, made before (no request is sent)."""
        return Session(self, session_id)

    def restore(self, snapshot, session_id=None):
        """A new session from a snapshot's bytes (POST /v1/sessions/restore);
        session_id restores under a chosen id where the server allows it."""
        path = "/v1/sessions/restore"
        if session_id is not None:
            path += "?id=" + _quote(session_id)
        status, headers, data = self._http.request("POST", path, bytes(snapshot), "application/octet-stream")
        answer = Transport.decode(status, headers, data)
        return Session(self, answer["id"])

    def tool_definition(self):
        """GET /v1/tool: run_python as an agent declares it to its model
        (name, description, input_schema, output_schema)."""
        return self._http.json("GET", "/v1/tool")

    def health(self):
        """GET /healthz."""
        return self._http.json("GET", "/healthz")

    def close(self):
        self._http.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Session:
    """A session of a spine serve: run(), snapshot(), delete(). In a with
    block, it is deleted at the end."""

    def __init__(self, client, session_id):
        self.client = client
        self.id = session_id

    def _path(self, tail=""):
        return "/v1/sessions/" + _quote(self.id) + tail

    def run(self, source, tools=None, inputs=None, files=None, timeout=None, early_reads=None, approve=None):
        """Runs source in the session, as Client.run does. While a run is
        paused (for client tools or an approval) the session is busy: its
        next run waits."""
        body, by_name = run_body(source, tools, inputs, files, timeout, early_reads)
        return self.client._drive(self._path("/run"), body, by_name, approve)

    def snapshot(self):
        """The session's state as bytes, for Client.restore here or on
        another server with the same tools and Spine. It holds everything
        the session's programs saw: keep it as secret."""
        status, headers, data = self.client._http.request("GET", self._path("/snapshot"))
        if status >= 300:
            Transport.decode(status, headers, data)
        return data

    def delete(self):
        """Ends the session (DELETE); a session gone already is no error."""
        try:
            Transport.decode(*self.client._http.request("DELETE", self._path()))
        except SpineError as e:
            if e.status != 404:
                raise

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.delete()

    def __repr__(self):
        return "Session(%r)" % self.id
