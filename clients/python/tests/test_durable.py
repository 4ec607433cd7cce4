"""Durable pauses (docs/scaling.md, "Paused runs") against two real spine
serve replicas, a and b, sharing a session store (file://, a temporary
folder): a run paused on a is continued by b, under a new run id that the
client follows, and a continuation refused 503 closed by a draining
replica is sent again. The client's requests go to a until the test moves
them to b, as a load balancer would once a's run is in the store or a
drains."""

import threading
import time

import pytest

import spine_client
from spine_client import Client
from spine_client._http import Transport

from conftest import RUN_ID, TOKEN, serve

SOURCE = "ask(1) + ask(2)"


class Routed:
    """Sends the client's requests to its own server until moved is set,
    then to other's; sent records (replica, path, status) of each."""

    def __init__(self, client, other_url):
        self.sent = []
        self.moved = False
        self.other = Transport(other_url, TOKEN)
        inner = client._http.request

        def request(method, path, *args, **kwargs):
            replica, send = ("b", self.other.request) if self.moved else ("a", inner)
            status, headers, data = send(method, path, *args, **kwargs)
            self.sent.append((replica, path, status))
            return status, headers, data

        client._http.request = request

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.other.close()


@pytest.fixture
def store(tmp_path):
    return "file://" + str(tmp_path)


def test_a_run_taken_over_is_followed_by_its_new_id(spine_bin, store):
    """b takes the run over at its first pause's results, from the store,
    and answers its next pause under a run id of its own: the client sends
    that pause's results there."""
    with serve(spine_bin, "--session-store", store, "--replica", "a") as a, \
            serve(spine_bin, "--session-store", store, "--replica", "b") as b, \
            Client(a.url, token=TOKEN) as c, Routed(c, b.url) as routed:

        def ask(n: int) -> int:
            """Ten times n; the first call moves the client to b: the
            run's pause is in the store before its answer."""
            routed.moved = True
            return 10 * n

        res = c.run(SOURCE, tools=[ask])
    assert res.value == 30 and res.pauses == 2
    [(_, _, _), (_, first, _), (_, second, _)] = routed.sent
    old, new = first.split("/")[3], second.split("/")[3]
    assert RUN_ID.fullmatch(old) and old.startswith("run_a."), old
    assert RUN_ID.fullmatch(new) and new.startswith("run_b.") and res.run_id == new
    assert routed.sent == [("a", "/v1/run", 200), ("b", first, 200), ("b", second, 200)]
    assert first.endswith("/tool_results") and second.endswith("/tool_results")


def test_a_drain_hands_the_run_over(spine_bin, store, monkeypatch):
    """a drains while its run waits for the client: it hands the run over
    to the store and answers the results 503 closed; the client sends them
    again after Retry-After, here to b, which continues the run."""
    with serve(spine_bin, "--session-store", store, "--replica", "a", "--drain-delay", "1h") as a, \
            serve(spine_bin, "--session-store", store, "--replica", "b") as b, \
            Client(a.url, token=TOKEN) as c, Routed(c, b.url) as routed:
        waits = []

        def sleep(seconds):
            waits.append(seconds)
            routed.moved = True  # the load balancer's next pick: a is out

        monkeypatch.setattr(spine_client.client, "_sleep", sleep)

        def ask(n: int) -> int:
            """Ten times n; the first call drains a."""
            if n == 1:
                a.drain()
            return 10 * n

        res = c.run(SOURCE, tools=[ask])
    assert res.value == 30 and res.pauses == 2 and waits == [1]
    assert [(replica, status) for replica, _, status in routed.sent] == [("a", 200), ("a", 503), ("b", 200), ("b", 200)]
    paths = [path for _, path, _ in routed.sent]
    assert paths[1] == paths[2] and paths[1].startswith("/v1/runs/run_a.")
    assert paths[3].startswith("/v1/runs/run_b.") and res.run_id == paths[3].split("/")[3]


def new_run_key(store_dir, known):
    """Waits until the store holds the key of a run other than those in
    known (a take-over writes its claim, then the run's pause under its new
    id) and returns it."""
    runs = store_dir / "runs"
    while True:
        keys = {p.name for p in runs.iterdir()} if runs.is_dir() else set()
        if keys - known:
            return (keys - known).pop()
        time.sleep(0.01)


def test_a_continuation_follows_the_run_it_moved_to(spine_bin, tmp_path, monkeypatch):
    """b takes the run over and dies (drained, --grace 0) before its next
    pause: it answers 503 closed, and the client sends the results again,
    to a, which held the run and answers 409 naming the id b continued it
    as; the client sends them there, and a takes the run over from b's
    stored pause. Past the pause lookup is allowed on b, where the program
    then spins, and asks for approval on a (--ask lookup), refused here."""
    store = "file://" + str(tmp_path)
    with serve(spine_bin, "--session-store", store, "--replica", "a", "--ask", "lookup") as a, \
            serve(spine_bin, "--session-store", store, "--replica", "b", "--grace", "0") as b, \
            Client(a.url, token=TOKEN) as c, Routed(c, b.url) as routed:
        keys = set()

        def sleep(seconds):
            routed.moved = False  # b is gone: the load balancer's next pick is a

        monkeypatch.setattr(spine_client.client, "_sleep", sleep)

        def drain_b_once_it_took_over():
            keys.add(new_run_key(tmp_path, set()))  # a's pause
            new_run_key(tmp_path, set(keys))  # b's claim, then its pause again under its new id
            b.drain()

        def ask(n: int) -> int:
            """Ten times n; the call moves the client to b, which a
            thread drains once it took the run over."""
            routed.moved = True
            threading.Thread(target=drain_b_once_it_took_over, daemon=True).start()
            return 10 * n

        approvals = []
        source = "n = ask(1)\ntry:\n    lookup('book')\n    while True:\n        pass\nexcept PermissionError:\n    pass\nn"
        res = c.run(source, tools=[ask], approve=lambda ap: approvals.append(ap.tool) or False)
    assert res.value == 10 and res.pauses == 2 and approvals == ["lookup"]
    assert [(replica, status) for replica, _, status in routed.sent] == [("a", 200), ("b", 503), ("a", 409), ("a", 200), ("a", 200)]
    paths = [path for _, path, _ in routed.sent]
    old, moved, last = (p.split("/")[3] for p in paths[2:5])
    assert paths[1] == paths[2] and old.startswith("run_a.") and moved.startswith("run_b.") and last.startswith("run_a.")
    assert paths[3] == "/v1/runs/%s/tool_results" % moved and paths[4].endswith("/approvals") and res.run_id == last
