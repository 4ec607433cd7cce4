"""spine_client.Client against a real spine serve (conftest.py)."""

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

import spine_client
from spine_client import Client, ProgramError, SpineError, tool

from conftest import RUN_ID, TOKEN


def get_weather(city: str) -> dict:
    """The weather in a city.

    Args:
        city: the city's name, e.g. "Paris"
    """
    if city == "Atlantis":
        raise LookupError("no such city")
    return {"city": city, "temp": 20}


class Counting:
    """Counts the client's HTTP requests by path."""

    def __init__(self, client):
        self.paths = []
        inner = client._http.request

        def request(method, path, *args, **kwargs):
            self.paths.append(path)
            return inner(method, path, *args, **kwargs)

        client._http.request = request


def test_get_weather(client):
    asked = []

    def weather(city: str) -> dict:
        """The weather in a city."""
        asked.append(city)
        return get_weather(city)

    res = client.run("print('asking')\nw = get_weather('Paris')\nw['temp'] * lookup(key='pen')",
                     tools={"get_weather": weather})
    assert asked == ["Paris"]
    assert res.value == 40  # 20 from this process's function, 2 from the server's demo lookup
    assert res.stdout == "asking\n"
    assert res.tool_calls == 2 and res.pauses == 1
    assert RUN_ID.fullmatch(res.run_id), res.run_id
    assert [c["tool"] for c in res.calls] == ["get_weather", "lookup"]


def test_module_run(server):
    res = spine_client.run("get_weather(city='Lyon')['city']", tools=[get_weather], base_url=server.url, token=TOKEN)
    assert res.value == "Lyon" and res.text == "'Lyon'"


def test_sixteen_reads_one_round_trip(client):
    counting = Counting(client)
    asked = []  # each call, with the number of requests sent before it

    @tool(read_only=True, name="shop.price")
    def price(item: str) -> int:
        """The price of an item."""
        asked.append((item, len(counting.paths)))
        return int(item[1:])

    src = "total = 0\nfor i in range(16):\n    total += shop.price(f'i{i}')\ntotal"
    res = client.run(src, tools=[price])
    assert res.value == sum(range(16)) and res.tool_calls == 16
    assert asked == [("i%d" % i, 1) for i in range(16)], "the 16 reads, all answered after the first request"
    assert res.pauses == 1
    assert len(counting.paths) == 2, counting.paths  # the run, and one tool_results
    assert counting.paths[1].endswith("/tool_results")


def test_reads_without_read_only_pause_each(client):
    counting = Counting(client)
    res = client.run("[get_weather(c)['city'] for c in 'abcd']", tools=[get_weather])
    assert res.value == ["a", "b", "c", "d"] and res.pauses == 4 and len(counting.paths) == 5


def test_error_result_raises_in_program(client):
    src = "try:\n    get_weather('Atlantis')\nexcept RuntimeError as e:\n    err = str(e)\nerr"
    assert client.run(src, tools=[get_weather]).value == "LookupError: no such city"
    with pytest.raises(ProgramError) as info:
        client.run("print('before')\nget_weather('Atlantis')", tools=[get_weather])
    e = info.value
    assert e.status == 422 and e.kind == "python" and e.type == "RuntimeError" and e.line == 2
    assert "RuntimeError: LookupError: no such city" in e.traceback
    assert e.stdout == "before\n" and e.error["message"] == "LookupError: no such city"


def test_value_without_json_form(client):
    def thing() -> dict:
        """Something JSON cannot hold."""
        return {"x": object()}

    res = client.run("try:\n    thing()\nexcept RuntimeError as e:\n    r = str(e)\nr", tools=[thing])
    assert res.value.startswith("TypeError: the tool's value cannot be sent")


def test_arguments_checked_before_the_caller(client):
    called = []
    with pytest.raises(ProgramError) as info:
        client.run("get_weather('Paris', 'Lyon')", tools={"get_weather": lambda city: called.append(city)})
    assert info.value.type == "TypeError" and called == []


def test_positional_only_and_defaults(client):
    def scale(x: float, /, factor: float = 2.0) -> float:
        """Scales x."""
        return x * factor

    assert client.run("[scale(3), scale(3, factor=10), scale(3, None)]", tools=[scale]).value == [6, 30, 6]


def test_async_tool_in_sync_client(client):
    import asyncio

    async def slow_upper(s: str) -> str:
        """Upper case, later."""
        await asyncio.sleep(0)
        return s.upper()

    assert client.run("slow_upper('ok')", tools=[slow_upper]).value == "OK"


def test_server_errors(client, server):
    with pytest.raises(SpineError) as info:
        client.run("1", tools={"lookup": get_weather})
    assert info.value.status == 400 and info.value.kind == "bad_request" and '"lookup"' in info.value.message
    with Client(server.url, token="not-the-token") as other:
        with pytest.raises(SpineError) as info:
            other.run("1")
    assert info.value.status == 401 and info.value.kind == "unauthorized"
    with pytest.raises(SpineError) as info:
        client.run("print('looping')\nwhile True:\n    pass", timeout=0.2)
    assert info.value.status == 408 and info.value.kind == "timeout" and info.value.stdout == "looping\n"
    with pytest.raises(ValueError):
        client.run("1", timeout=0)


def test_inputs_and_files(client):
    src = ("import pathlib\n"
           "rows = pathlib.Path('data/prices.csv').read_text().split()\n"
           "pathlib.Path('out.txt').write_bytes(b'\\x00done')\n"
           "inputs['n'] * len(rows)")
    res = client.run(src, inputs={"n": 3}, files={"data/prices.csv": "a\nb\n", "raw.bin": b"\x00\x01"})
    assert res.value == 6 and res.files == {"out.txt": b"\x00done"}


def test_threads_share_a_client(client):
    def one(i):
        return client.run("get_weather(inputs['c'])['city']", tools=[get_weather], inputs={"c": "c%d" % i}).value

    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(one, range(8))) == ["c%d" % i for i in range(8)]


def test_session(client):
    with client.session() as s:
        assert s.run("w = get_weather('Oslo')", tools=[get_weather]).pauses == 1
        assert s.run("w['city']").value == "Oslo"  # kept, with no tools this time
        snap = s.snapshot()
        assert isinstance(snap, bytes) and len(snap) > 0
        with client.restore(snap) as copy:
            assert copy.id != s.id
            assert copy.run("w['temp'] + 1").value == 21
        with pytest.raises(SpineError) as info:
            copy.run("1")
        assert info.value.status == 404 and info.value.kind == "not_found"
        same = client.attach(s.id)
        assert same.run("w['city'].lower()").value == "oslo"
    with pytest.raises(SpineError) as info:
        s.run("1")
    assert info.value.kind == "not_found"
    s.delete()  # gone already: no error


def test_session_busy_while_paused(client):
    """While a session's run waits for its tools, the session's next run
    waits for it: a short one times out without starting."""
    with client.session() as s:
        seen = []

        def hold(x: int) -> int:
            """Runs another run of the session while this one is paused."""
            try:
                s.run("'never'", timeout=0.05)
            except SpineError as e:
                seen.append(e.kind)
            return x

        assert s.run("hold(7)", tools=[hold]).value == 7
        assert seen == ["timeout"]


def test_tool_definition_and_health(client):
    d = client.tool_definition()
    assert d["name"] == "run_python" and "source" in d["input_schema"]["properties"]
    assert client.health()["status"] == "ok"


def test_results_after_the_end_are_refused(client):
    res = client.run("get_weather('Rome')['city']", tools=[get_weather])
    with pytest.raises(SpineError) as info:
        client._send_results(res.run_id, [{"id": "call_1", "value": 1}])
    assert info.value.status == 404


def test_closed_client(server):
    c = Client(server.url, token=TOKEN)
    c.close()
    with pytest.raises(RuntimeError):
        c.run("1")


def test_keep_alive_reused(client):
    client.run("1")
    conns = list(client._http._idle)
    client.run("2")
    assert client._http._idle == conns, "the second request reused the first's connection"
    # a connection the server closed is not reused
    for conn in conns:
        conn.sock.close()
    assert client.run("3").value == 3


def test_tool_raising_is_not_the_clients_failure(client):
    lock = threading.Lock()

    def boom() -> int:
        """Fails."""
        with lock:
            raise ValueError("")

    res = client.run("try:\n    boom()\nexcept RuntimeError as e:\n    r = str(e)\nr", tools=[boom])
    assert res.value == "ValueError: ValueError"


def test_answers_not_from_spine():
    """A proxy's page in place of the server's answer is a SpineError of
    kind "http", whatever its status."""
    import http.server

    class Page(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            status = 502 if self.path == "/bad/v1/run" else 200
            body = b"<html>a proxy's page</html>"
            self.send_response(status)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    t = threading.Thread(target=srv.serve_forever)
    t.start()
    try:
        url = "http://127.0.0.1:%d" % srv.server_address[1]
        for prefix, status in (("/bad", 502), ("/ok", 200)):
            with Client(url + prefix) as c:
                with pytest.raises(SpineError) as info:
                    c.run("1")
            assert info.value.status == status and info.value.kind == "http" and "a proxy's page" in info.value.message
    finally:
        srv.shutdown()
        srv.server_close()
        t.join()


def test_results_sent_again_when_every_slot_is_busy(spine_bin, monkeypatch):
    """Results refused 429 (the one slot busy: the run keeps waiting) are
    sent again after Retry-After. The slot's holder, a looping run, is
    stopped during the client's wait, by closing its connection."""
    from conftest import serve
    from spine_client._http import Aborter

    with serve(spine_bin, "--slots", "1") as srv, Client(srv.url, token=TOKEN) as c:
        holder = Aborter()
        held, threads = [], []

        def hold():
            try:
                c._http.json("POST", "/v1/run", {"source": "while True:\n    pass"}, aborter=holder)
            except OSError as e:
                held.append(e)

        def busy() -> str:
            """Starts a run that takes the only slot, and waits until it has it."""
            threads.append(threading.Thread(target=hold))
            threads[0].start()
            while c.health()["slots_busy"] == 0:
                time.sleep(0.01)
            return "go on"

        waits = []

        def sleep(seconds):
            waits.append(seconds)
            holder.abort()
            while c.health()["slots_busy"] != 0:
                time.sleep(0.01)

        monkeypatch.setattr(spine_client.client, "_sleep", sleep)
        res = c.run("busy()", tools=[busy])
        threads[0].join()
        assert res.value == "go on" and waits == [1.0] and len(held) == 1


def test_tool_returning_none(client):
    noted = []

    def note(text: str) -> None:
        """Notes text."""
        noted.append(text)

    assert client.run("note('a') is None", tools=[note]).value is True and noted == ["a"]
