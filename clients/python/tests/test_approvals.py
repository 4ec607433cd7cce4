"""Approvals that wait (docs/http.md) against a real spine serve that asks
for them: --ask 'prices.*' (the demo tool prices.list) and --ask '*.delete'
(a client tool files.delete). Every run here ends, decided: a run left
paused would hold the server's drain at the end for --grace."""

import asyncio

import pytest

import spine_client
from spine_client import Approval, ApprovalRequired, AsyncClient, Client

from conftest import RUN_ID, TOKEN, serve

REFUSED = "try:\n    prices.list()\nexcept PermissionError as e:\n    r = str(e)\nr"


@pytest.fixture(scope="module")
def asking(spine_bin):
    with serve(spine_bin, "--ask", "prices.*", "--ask", "*.delete", "--replica", "ask") as s:
        yield s


@pytest.fixture
def client(asking):
    with Client(asking.url, token=TOKEN) as c:
        yield c


def test_approve_allows(client):
    seen = []

    def approve(a):
        seen.append(a)
        return True

    res = client.run("print('asking')\nlen(prices.list(limit=2))", approve=approve)
    assert res.value == 2 and res.stdout == "asking\n" and res.pauses == 1
    assert RUN_ID.fullmatch(res.run_id) and res.run_id.startswith("run_ask.")
    [a] = seen
    assert isinstance(a, Approval) and a.id == "approval_1" and a.tool == "prices.list"
    assert a.arguments == {"limit": 2} and a.run_id == res.run_id
    assert "--ask prices.*" in a.reason, a.reason


def test_approve_refuses(client):
    """A refusal raises PermissionError in the program: with the reason
    given, or the server's words without one."""
    assert client.run(REFUSED, approve=lambda a: (False, "not on a Friday")).value == "not on a Friday"
    assert client.run(REFUSED, approve=lambda a: False).value == "the caller refused the call"
    res = client.run("prices.list()\nlen(prices.list(limit=1))", approve=lambda a: (True, None))
    assert res.value == 1 and res.pauses == 2  # one approval a call


def test_without_approve_the_error_carries_the_run(client):
    """Without approve the client raises ApprovalRequired: the run stays
    paused, and decide() answers it later, then drives it on (here to its
    client tool's pause)."""
    deleted = []

    def delete(path: str) -> str:
        """Deletes a file."""
        deleted.append(path)
        return "deleted " + path

    tools = {"files.delete": delete}
    with pytest.raises(ApprovalRequired) as info:
        client.run("print('before')\nfiles.delete('/tmp/x')", tools=tools)
    e = info.value
    assert (e.status, e.kind) == (200, "approval_required") and RUN_ID.fullmatch(e.run_id)
    assert e.run_id in str(e) and "files.delete (approval_1)" in str(e)
    assert [(a.tool, a.arguments) for a in e.approvals] == [("files.delete", {"path": "/tmp/x"})]
    assert e.stdout == "before\n" and deleted == []
    res = client.decide(e.run_id, [{"id": a.id, "allow": True} for a in e.approvals], tools=tools)
    assert res.value == "deleted /tmp/x" and deleted == ["/tmp/x"]
    assert res.pauses == 2 and res.run_id == e.run_id  # the approval, then files.delete's own pause


def test_approve_that_returns_no_decision(client):
    """An approve that returns neither a bool nor (allow, reason) is the
    caller's TypeError; its run still waits, and is decided by decide()."""
    seen = []
    with pytest.raises(TypeError) as info:
        client.run("prices.list()", approve=lambda a: seen.append(a))
    msg = str(info.value)
    assert "approve must return True, False or (allow, reason)" in msg, msg
    assert "prices.list's call approval_1 of run %s" % seen[0].run_id in msg, msg
    with pytest.raises(spine_client.ProgramError) as info:
        client.decide(seen[0].run_id, [{"id": "approval_1", "allow": False}])
    assert info.value.type == "PermissionError" and info.value.run_id == seen[0].run_id


def test_sessions_and_async_approve(client, asking):
    with client.session() as s:
        assert s.run("p = prices.list(limit=1)", approve=lambda a: True).pauses == 1
        assert s.run("len(p)").value == 1

    async def main():
        calls = []

        async def approve(a):
            await asyncio.sleep(0)
            calls.append(a.tool)
            return a.arguments.get("limit") == 1, "one at most"

        async with AsyncClient(asking.url, token=TOKEN) as c:
            first = await c.run("len(prices.list(limit=1))", approve=approve)
            second = await c.run(REFUSED.replace("prices.list()", "prices.list(limit=2)"), approve=approve)
            with pytest.raises(ApprovalRequired) as info:
                await c.run("len(prices.list(limit=2))")
            e = info.value
            third = await c.decide(e.run_id, [{"id": e.approvals[0].id, "allow": True}])
            return calls, first, second, third

    calls, first, second, third = asyncio.run(main())
    assert calls == ["prices.list", "prices.list"]
    assert first.value == 1 and second.value == "one at most"
    assert third.value == 2 and third.pauses == 1


def test_sync_client_awaits_an_async_approve(client):
    async def approve(a):
        await asyncio.sleep(0)
        return True

    assert client.run("len(prices.list(limit=1))", approve=approve).value == 1
