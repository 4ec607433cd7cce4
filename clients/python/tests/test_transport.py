"""What the client does with answers beside a run's own: Retry-After out of
bounds, 503 closed and decisions on approvals sent again, redirects, a
continuation that reached the wrong replica, a paused run resumed after the
client gave up; TCP keepalive and descriptors past 1024; the tests' server's
environment."""

import asyncio
import http.server
import json
import os
import resource
import socket
import threading

import pytest

import spine_client
from spine_client import AsyncClient, Client, SpineError
from spine_client._core import MAX_RETRY_AFTER, RESULT_RETRIES, retry_wait
from spine_client._http import KEEPALIVE_IDLE, UNACKED_TIMEOUT_MS

from conftest import RUN_ID, TOKEN, serve

PAUSE = {"value": None, "stdout": "", "stderr": "", "tool_calls": 0, "error": None, "timing": {}}


class Scripted:
    """A local HTTP server answering each request with the next of answers
    (status, headers, JSON body or None), recording (method, path, body)."""

    def __init__(self, *answers):
        self.answers = list(answers)
        self.seen = []
        scripted = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def answer(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                scripted.seen.append((self.command, self.path, json.loads(body) if body[:1] == b"{" else body))
                status, headers, payload = scripted.answers.pop(0)
                data = b"" if payload is None else json.dumps(payload).encode()
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = answer

            def log_message(self, *args):
                pass

        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d" % self.srv.server_address[1]
        self.thread = threading.Thread(target=self.srv.serve_forever)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.srv.shutdown()
        self.srv.server_close()
        self.thread.join()


def overloaded(retry_after):
    return (429, {"Retry-After": retry_after}, {"error": {"kind": "overloaded", "message": "all 1 run slots are busy"}})


def test_retry_wait_bounds():
    assert retry_wait(None) == 1 and retry_wait(float("nan")) == 1
    assert retry_wait(-5) == 0 and retry_wait(2.5) == 2.5
    assert retry_wait(float("inf")) == MAX_RETRY_AFTER == retry_wait(1e9) == 30


def test_retry_after_out_of_bounds_is_clamped(monkeypatch):
    """A negative Retry-After (time.sleep would raise) waits 0 seconds, an
    infinite or huge one (it would hang) 30."""
    waits = []
    monkeypatch.setattr(spine_client.client, "_sleep", waits.append)
    pause = dict(PAUSE, status="tool_calls", run_id="run_1", pending=[{"id": "call_1", "name": "one", "arguments": {}}])
    with Scripted((200, {}, pause), overloaded("-1"), overloaded("inf"), overloaded("1e9"),
                  (200, {}, dict(PAUSE, value=1, status="done"))) as srv, Client(srv.url) as c:
        assert c.run("one()", tools={"one": lambda: 1}).value == 1
    assert waits == [0, 30, 30]


def test_giving_up_carries_the_run_id_and_results(monkeypatch):
    """After its retries the client raises the 429, with what resume needs."""
    monkeypatch.setattr(spine_client.client, "_sleep", lambda s: None)
    assert Client().retries == RESULT_RETRIES == 60
    pause = dict(PAUSE, status="tool_calls", run_id="run_1", pending=[{"id": "call_1", "name": "one", "arguments": {}}])
    with Scripted((200, {}, pause), *[overloaded("1")] * 3) as srv, Client(srv.url, retries=2) as c:
        with pytest.raises(SpineError) as info:
            c.run("one()", tools={"one": lambda: 7})
        assert len(srv.seen) == 4
    e = info.value
    assert e.kind == "overloaded" and e.run_id == "run_1" and e.results == [{"id": "call_1", "value": 7}]


def closed(retry_after=None):
    headers = {} if retry_after is None else {"Retry-After": retry_after}
    return (503, headers, {"error": {"kind": "closed", "message": "the server is draining (shutting down)"}})


def test_closed_is_sent_again(monkeypatch):
    """A continuation answered 503 closed (its replica drains; with a
    session store the next replica continues the run) is sent again, the
    same, after Retry-After clamped as for 429 (1 without one); another 503
    is not."""
    waits = []
    monkeypatch.setattr(spine_client.client, "_sleep", waits.append)
    pause = dict(PAUSE, status="tool_calls", run_id="run_1", pending=[{"id": "call_1", "name": "one", "arguments": {}}])
    with Scripted((200, {}, pause), closed("inf"), closed(), (200, {}, dict(PAUSE, value=1, status="done"))) as srv, \
            Client(srv.url) as c:
        assert c.run("one()", tools={"one": lambda: 1}).value == 1
    assert waits == [30, 1]
    assert [body for _, _, body in srv.seen[1:]] == [{"results": [{"id": "call_1", "value": 1}]}] * 3
    unavailable = (503, {}, {"error": {"kind": "store_unavailable", "message": "the store could not be read"}})
    with Scripted((200, {}, pause), unavailable) as srv, Client(srv.url) as c:
        with pytest.raises(SpineError) as info:
            c.run("one()", tools={"one": lambda: 1})
    assert info.value.kind == "store_unavailable" and len(srv.seen) == 2 and waits == [30, 1]


APPROVAL = dict(PAUSE, status="approval_required", run_id="run_1",
                approvals=[{"id": "approval_1", "tool": "files.delete", "arguments": {"path": "x"}, "reason": "--ask *.delete"}])


def test_decisions_sent_again(monkeypatch):
    """Decisions on an approval are sent again as tool results are: 429
    overloaded, 503 closed; after the retries the error carries the run's
    id and the decisions, for decide()."""
    waits = []
    monkeypatch.setattr(spine_client.client, "_sleep", waits.append)
    decided = {"approvals": [{"id": "approval_1", "allow": False, "reason": "no"}]}
    with Scripted((200, {}, APPROVAL), overloaded("2"), closed("1"), (200, {}, dict(PAUSE, value=3, status="done"))) as srv, \
            Client(srv.url) as c:
        res = c.run("files.delete('x')", approve=lambda a: (False, "no"))
    assert res.value == 3 and res.pauses == 1 and waits == [2, 1]
    assert srv.seen[1:] == [("POST", "/v1/runs/run_1/approvals", decided)] * 3
    with Scripted((200, {}, APPROVAL), *[closed("0")] * 3) as srv, Client(srv.url, retries=2) as c:
        with pytest.raises(SpineError) as info:
            c.run("files.delete('x')", approve=lambda a: (False, "no"))
    e = info.value
    assert (e.kind, e.run_id, e.decisions, e.results) == ("closed", "run_1", decided["approvals"], None)


def test_async_closed_and_decisions_sent_again(monkeypatch):
    waits = []

    async def sleep(seconds):
        waits.append(seconds)

    monkeypatch.setattr(spine_client.aio, "_sleep", sleep)
    pause = dict(PAUSE, status="tool_calls", run_id="run_2", pending=[{"id": "call_1", "name": "one", "arguments": {}}])

    async def main(url):
        async with AsyncClient(url) as c:
            return await c.run("one()", tools={"one": lambda: 1}, approve=lambda a: True)

    with Scripted((200, {}, APPROVAL), closed("5"), (200, {}, pause), overloaded("-1"), closed(),
                  (200, {}, dict(PAUSE, value=4, status="done"))) as srv:
        res = asyncio.run(main(srv.url))
    assert res.value == 4 and res.pauses == 2 and waits == [5, 0, 1]
    assert [path for _, path, _ in srv.seen] == ["/v1/run"] + ["/v1/runs/run_1/approvals"] * 2 + ["/v1/runs/run_2/tool_results"] * 3


def test_redirects_are_not_followed():
    """A 307 from a proxy would send the run's source, inputs and files to
    another address: it is an error, and the other address hears nothing."""
    with Scripted() as elsewhere:
        moved = (307, {"Location": elsewhere.url + "/v1/run"}, None)
        with Scripted(moved, moved) as srv, Client(srv.url) as c:
            with pytest.raises(SpineError) as info:
                c.run("secret = 1", inputs={"key": "k"})
            with pytest.raises(SpineError):
                c.attach("s1").snapshot()
        assert elsewhere.seen == []
    e = info.value
    assert e.status == 307 and e.kind == "http" and elsewhere.url + "/v1/run" in e.message


def test_keepalive_on_connections(client):
    client.run("1")
    sock = client._http._idle[-1].sock
    assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
    if hasattr(socket, "TCP_KEEPIDLE"):
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == KEEPALIVE_IDLE
    if hasattr(socket, "TCP_USER_TIMEOUT"):
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == UNACKED_TIMEOUT_MS


def test_keep_alive_with_descriptors_past_1024(client):
    """select.select refuses a descriptor of 1024 or more: the connection
    was taken for dropped and never reused."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < 1100:
        pytest.skip("RLIMIT_NOFILE is %d" % soft)
    held = []
    try:
        while not held or held[-1] < 1024:
            held.append(os.open(os.devnull, os.O_RDONLY))
        with Client(client.base_url, token=TOKEN) as c:
            c.run("1")
            conn = c._http._idle[-1]
            assert conn.sock.fileno() >= 1024
            assert c.run("2").value == 2
            assert c._http._idle == [conn], "the second run reused the first's connection"
    finally:
        for fd in held:
            os.close(fd)


def test_resume_a_paused_run(client):
    """A run paused for its tools, its results sent by resume."""
    answer = client._http.json("POST", "/v1/run", {
        "source": "double(21) + double(1)",
        "tools": [{"name": "double", "input_schema": {"type": "object", "properties": {"n": {"type": "integer"}}}}],
    })
    assert answer["status"] == "tool_calls" and RUN_ID.fullmatch(answer["run_id"])
    res = client.resume(answer["run_id"], [{"id": answer["pending"][0]["id"], "value": 42}],
                        tools={"double": lambda n: 2 * n})
    assert res.value == 44 and res.pauses == 2 and res.run_id == answer["run_id"]


def test_run_elsewhere_and_run_lost_are_not_sent_again(client):
    """A continuation that reached another replica (421) or a later process
    of the run's (410) raises at once: the run ended with its replica."""
    replica, incarnation, _ = client.run("ask()", tools={"ask": lambda: 1}).run_id[len("run_"):].split(".")
    other = "%08x" % (int(incarnation, 16) ^ 1)  # an earlier process of the same replica
    sent = []
    inner = client._http.request
    client._http.request = lambda method, path, *a, **kw: sent.append(path) or inner(method, path, *a, **kw)
    results = [{"id": "call_1", "value": 1}]
    for run_id, status, kind in (("run_r9.%s.%s" % (incarnation, "0" * 32), 421, "run_elsewhere"),
                                 ("run_%s.%s.%s" % (replica, other, "0" * 32), 410, "run_lost")):
        sent.clear()
        with pytest.raises(SpineError) as info:
            client.resume(run_id, results)
        e = info.value
        assert (e.status, e.kind, e.run_id, e.results) == (status, kind, run_id, results)
        assert len(sent) == 1 and run_id in e.message


def test_async_run_lost(server):
    async def main():
        async with AsyncClient(server.url, token=TOKEN) as c:
            with pytest.raises(SpineError) as info:
                await c.resume("run_r9.0123abcd." + "0" * 32, [{"id": "call_1", "value": 1}])
            return info.value

    e = asyncio.run(main())
    assert e.status == 421 and e.kind == "run_elsewhere" and e.run_id.startswith("run_r9.")


def test_server_environment_without_spine_variables(spine_bin, monkeypatch):
    """SPINE_REPLICA in the tests' environment does not reach their server."""
    monkeypatch.setenv("SPINE_REPLICA", "from-the-caller")
    with serve(spine_bin) as srv, Client(srv.url, token=TOKEN) as c:
        run_id = c.run("ask()", tools={"ask": lambda: 1}).run_id
    assert RUN_ID.fullmatch(run_id) and "from-the-caller" not in run_id
