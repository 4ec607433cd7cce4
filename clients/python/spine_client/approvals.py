"""Approvals that wait (docs/http.md): a run whose tool call needs a
person's approval pauses with status "approval_required"; the caller's
decisions go to POST /v1/runs/{run_id}/approvals."""

import asyncio
import inspect

from .errors import ApprovalRequired

__all__ = ["Approval"]


class Approval:
    """A tool call a paused run waits in until its caller allows or refuses
    it: id ("approval_1"), tool (the tool's name), arguments (the call's
    arguments as the server judged them), reason (why it asks), run_id."""

    def __init__(self, item, run_id):
        self.id = item.get("id")
        self.tool = item.get("tool", "")
        self.arguments = item.get("arguments") or {}
        self.reason = item.get("reason", "")
        self.run_id = run_id

    def __repr__(self):
        return "Approval(id=%r, tool=%r, arguments=%r, reason=%r)" % (self.id, self.tool, self.arguments, self.reason)


def approvals_of(answer):
    """The Approvals of a pause of status "approval_required"."""
    return [Approval(item, answer.get("run_id")) for item in answer.get("approvals") or []]


def decision(approval, answer):
    """The decision sent for approval from what the caller's approve
    returned: True or False, or (allow, reason)."""
    allow, reason = answer, None
    if isinstance(answer, (tuple, list)) and len(answer) == 2:
        allow, reason = answer
    if not isinstance(allow, bool) or (reason is not None and not isinstance(reason, str)):
        raise TypeError("approve must return True, False or (allow, reason) with a str reason, not %r "
                        "(for %s's call %s of run %s, which still waits)" % (answer, approval.tool, approval.id, approval.run_id))
    d = {"id": approval.id, "allow": allow}
    if reason:
        d["reason"] = reason
    return d


def _required(answer, approve):
    """The pause's Approvals; ApprovalRequired when there is no approve."""
    approvals = approvals_of(answer)
    if approve is None:
        raise ApprovalRequired(answer, approvals)
    if not approvals:
        raise ApprovalRequired(answer, approvals, "a pause for approval that names no call")
    return approvals


def decide_sync(approve, answer):
    """The decisions on a pause's approvals, for the sync client: approve is
    called on each in order; a coroutine it returns is run to its end on an
    event loop of its own."""
    out = []
    for a in _required(answer, approve):
        value = approve(a)
        if inspect.isawaitable(value):
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                value = asyncio.run(_await(value))
            else:
                if inspect.iscoroutine(value):
                    value.close()
                raise RuntimeError("an async approve called by the sync Client inside a running event loop: use AsyncClient")
        out.append(decision(a, value))
    return out


async def decide_async(approve, answer):
    """The decisions on a pause's approvals, for the asyncio client: approve
    (a coroutine function, or a plain function called on the event loop's
    thread) is awaited on each in order."""
    out = []
    for a in _required(answer, approve):
        value = approve(a)
        if inspect.isawaitable(value):
            value = await value
        out.append(decision(a, value))
    return out


async def _await(awaitable):
    return await awaitable
