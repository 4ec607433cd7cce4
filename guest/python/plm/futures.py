"""The Guest's side of early reads' futures, and the way of every tool call.

``pending`` maps the bytes of a prepared request to its handles, oldest first. Every call
of a tool goes through ``send``: when a handle waits for exactly those bytes, the call
claims it (``_spine.resolve``), otherwise it is a normal call (``_spine.call``). Call sites
are never rewritten, so a call evaluates its arguments, raises and shows in tracebacks
exactly as without early reads. ``_offer`` prepares a request (``_spine.prepare``) whose
arguments are plain data; the reads prefix mode prepared are counted in ``_spare`` until a
plan of the pass adopts them.

``start`` begins a call the program handed to an executor (``world``): the Host starts it
at once through the same prepare path, and ``settle`` claims it later. A started call
stands for a call the program made when it handed it over, so started calls are claimed
oldest first, and all of them before any other tool call (``send``) and before the run
ends: the Host sees the program's calls in the program's order, as without early reads.

``busy`` is true while ``send`` or the pass's helper works on the table: the chain step
(``plm.chain``), which the Host's wake runs between two bytecodes, leaves it alone then.
"""

from builtins import (
    BaseException,
    Exception,
    dict,
    hash,
    len,
    tuple,
    type,
    zip,
)

import _spine
from plm.purity import _key_cache, _plain
from plm.wire import accepted, encode_request

__all__ = ["pending", "send", "prepare", "reset", "start", "settle"]

MAX_MESSAGE = _spine.MAX_MESSAGE  # maxMessage: the Host refuses larger requests

# A pending read is found by its request's hash, not its bytes: the Host keeps the bytes
# (and compares them when the read is claimed; on a mismatch it makes the call instead),
# so a read costs the program's heap a few words, whatever its size, claimed or not.
pending = {}  # hash(request bytes) -> [handle, ...], oldest first
_started = []  # [(handle, request bytes, deliver)] of the calls start began, oldest first
_spare = {}  # hash(request bytes) -> how many of pending[request] prefix mode made and no plan adopted yet
_spare_calls = set()  # (tool, keyword names) of every read prefix mode made in this run
last_handle = 0  # the handle of the read _offer prepared (or reused) last
busy = False  # send or run_plans is at work on the table: the chain step waits
CHAIN = "chain"  # _offer's spare for a chained read: one of prefix mode's kind that reuses a pending read


def reset():
    """Forget every handle: the state of a run that has ended."""
    pending.clear()
    _spare.clear()
    _spare_calls.clear()
    _started.clear()


def send(request):
    """Send one encoded tool request: claim a prepared read of exactly these bytes, or call."""
    if _started:
        settle()
    if pending:
        global busy
        busy = True
        try:
            digest = hash(request)
            handles = pending.get(digest)
            if handles:
                handle = handles.pop(0)
                if handles:
                    spare = _spare.get(digest)
                    if spare is not None and spare > len(handles):
                        _spare[digest] = len(handles)
                else:
                    del pending[digest]
                    _spare.pop(digest, None)
            else:
                handle = 0
        finally:
            busy = False
        if handle:
            return _spine.resolve(handle, request)
    return _spine.call(request)


def _offer(tool, args, spare=False):
    """Prepare the call of tool with args. True: a read is pending for it; False: the Host
    said no (stop preparing for now); None: args are not plain data. spare: prefix mode's
    or a chain's read (CHAIN: a read pending for the same bytes serves it instead), which
    a plan of the pass adopts instead of preparing it again."""
    global last_handle
    if type(args) is not dict or not _plain(args):
        return None  # not plain data
    names = tuple(args)
    args = accepted(tool, args)  # the request's arguments, as the tool's proxy makes them
    if args is None:
        return None  # the call raises TypeError before any request
    request = encode_request(tool, args)
    if len(request) > MAX_MESSAGE:
        return None
    digest = hash(request)
    if not spare:
        adoptable = _spare.get(digest)
        if adoptable:
            # Prefix mode or a chain prepared it already: this plan takes that read over.
            if adoptable > 1:
                _spare[digest] = adoptable - 1
            else:
                del _spare[digest]
            handles = pending.get(digest)
            last_handle = handles[-adoptable] if handles and len(handles) >= adoptable else 0
            return True
    elif spare is CHAIN:
        handles = pending.get(digest)
        if handles:
            last_handle = handles[-1]
            return True
    handle = _spine.prepare(request)
    del request  # the Host has its copy
    if not handle:
        return False
    last_handle = handle
    handles = pending.get(digest)
    if handles is None:
        pending[digest] = [handle]
    else:
        handles.append(handle)
    if spare:
        _spare[digest] = _spare.get(digest, 0) + 1
        _spare_calls.add((tool, names))
    return True


def prepare(tool, thunk):
    """Prepare the call of tool with the arguments thunk() returns (a dict).

    Evaluating the arguments early never raises into the program: any failure just
    means no prepare. Returns True when a read is pending for the request."""
    try:
        _key_cache.clear()
        return _offer(tool, thunk()) is True
    except BaseException:
        return False


def _offer_call(tool, names, fns, env, spare=False):
    try:
        args = {}
        for name, fn in zip(names, fns):
            args[name] = fn(env)
        return _offer(tool, args, spare)
    except Exception:
        return None


def start(tool, args, deliver):
    """Start the call of tool with args (a dict of plain data) on the Host now, to be
    claimed by settle, which hands deliver(response, None) the response's bytes, or
    deliver(None, exc) the exception that claiming it raised. False when the call did not
    start (args not plain data, or the Host said no): then the caller makes the call."""
    if type(args) is not dict or not _plain(args):
        return False
    args = accepted(tool, args)
    if args is None:
        return False
    request = encode_request(tool, args)
    if len(request) > MAX_MESSAGE:
        return False
    handle = _spine.prepare(request)
    if not handle:
        return False
    _started.append((handle, request, deliver))
    return True


def settle(until=None):
    """Claim the started calls oldest first: every one, or those up to the one whose
    deliver is until."""
    while _started:
        handle, request, deliver = _started.pop(0)
        try:
            response = _spine.resolve(handle, request)
        except Exception as exc:
            deliver(None, exc)
        else:
            deliver(response, None)
        if deliver is until:
            return
