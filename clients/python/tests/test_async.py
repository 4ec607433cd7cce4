"""spine_client.AsyncClient against a real spine serve (conftest.py)."""

import asyncio

import pytest

from spine_client import AsyncClient, ProgramError, SpineError, tool

from conftest import TOKEN


def run(coro):
    return asyncio.run(coro)


def test_async_tools_gathered(server):
    """A pause's calls of a coroutine tool are awaited together: all 16 have
    started before any ends."""
    state = {"in_flight": 0, "most": 0}

    @tool(read_only=True, name="shop.price")
    async def price(item: str) -> int:
        """The price of an item."""
        state["in_flight"] += 1
        state["most"] = max(state["most"], state["in_flight"])
        await asyncio.sleep(0)
        state["in_flight"] -= 1
        return int(item[1:])

    async def main():
        async with AsyncClient(server.url, token=TOKEN) as c:
            return await c.run("sum(shop.price(f'i{i}') for i in range(16))", tools=[price])

    res = run(main())
    assert res.value == sum(range(16)) and res.pauses == 1 and state["most"] == 16


def test_async_plain_function_and_errors(server):
    def get_weather(city: str) -> dict:
        """The weather in a city."""
        if city == "Atlantis":
            raise LookupError("no such city")
        return {"temp": 20}

    async def main():
        async with AsyncClient(server.url, token=TOKEN) as c:
            res = await c.run("get_weather('Paris')['temp'] * lookup(key='pen')", tools=[get_weather])
            with pytest.raises(ProgramError) as info:
                await c.run("get_weather('Atlantis')", tools=[get_weather])
            return res, info.value

    res, err = run(main())
    assert res.value == 40
    assert err.type == "RuntimeError" and "LookupError: no such city" in err.traceback


def test_async_runs_at_once(server):
    """Several runs of one AsyncClient go on together: each run's tool waits
    until every run has reached it."""
    n = 4
    reached = []
    gate = None

    async def meet(i: int) -> int:
        """Waits for the other runs."""
        reached.append(i)
        if len(reached) == n:
            gate.set()
        await gate.wait()
        return i * 10

    async def main():
        nonlocal gate
        gate = asyncio.Event()
        async with AsyncClient(server.url, token=TOKEN) as c:
            return await asyncio.gather(*(c.run("meet(inputs['i'])", tools=[meet], inputs={"i": i}) for i in range(n)))

    assert [r.value for r in run(main())] == [0, 10, 20, 30]


def test_async_session(server):
    async def double(x: int) -> int:
        """Twice x."""
        return 2 * x

    async def main():
        async with AsyncClient(server.url, token=TOKEN) as c:
            async with await c.session() as s:
                await s.run("y = double(21)", tools=[double])
                got = (await s.run("y")).value
                snap = await s.snapshot()
                copy = await c.restore(snap)
                again = (await copy.run("y + 1")).value
                await copy.delete()
                with pytest.raises(SpineError) as info:
                    await copy.run("1")
                return got, again, info.value.status

    assert run(main()) == (42, 43, 404)


def test_async_cancel_stops_the_run(server):
    """A task cancelled while its run is going closes its connection: the
    server stops the run and frees its slot."""

    async def main():
        async with AsyncClient(server.url, token=TOKEN) as c:
            started = asyncio.Event()

            async def mark() -> int:
                """Says the run has started."""
                started.set()
                return 1

            task = asyncio.ensure_future(c.run("mark()\nwhile True:\n    pass", tools=[mark]))
            await started.wait()
            # The results are on their way; once the server holds a slot for
            # the run, cancel the task.
            while (await c.health())["slots_busy"] == 0:
                await asyncio.sleep(0.01)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            while (await c.health())["slots_busy"] != 0:
                await asyncio.sleep(0.01)
            return await c.run("'after'")

    before = canceled(server)
    assert run(main()).value == "after"
    assert canceled(server) == before + 1, "the server saw its client go away"


def canceled(server):
    """The server's count of runs stopped because their client went away."""
    from spine_client._http import Transport

    _, _, data = Transport(server.url, TOKEN).request("GET", "/metrics")
    for line in data.decode().splitlines():
        if line.startswith('spine_runs_total{outcome="canceled"}'):
            return int(float(line.split()[-1]))
    return 0


def test_async_keep_alive(server):
    """The async client's requests reuse a kept-alive connection and its socket."""

    async def main():
        async with AsyncClient(server.url, token=TOKEN) as c:
            await c.run("1")
            socks = [conn.sock for conn in c._http._idle]
            await c.run("2")
            return socks, [conn.sock for conn in c._http._idle]

    before, after = run(main())
    assert len(before) == 1 and after == before
