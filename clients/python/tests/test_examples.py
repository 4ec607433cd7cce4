"""examples/agent.py's two loops against recorded exchanges: each model
call is answered by testdata/API/N-response.json, in the API's own JSON,
and each request the loop sent is checked against N-request.json. The
programs the model wrote run on the real spine serve (conftest.py), their
tools answered by the example's Python function.

SPINE_UPDATE_TESTDATA=1 rewrites the N-request.json files from what the
loops send (read the diff before committing it)."""

import io
import json
import os
import pathlib
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "examples"))

import agent  # noqa: E402

TESTDATA = HERE.parent / "examples" / "testdata"
UPDATE = os.environ.get("SPINE_UPDATE_TESTDATA") == "1"


class Replay:
    """A model that answers with the recorded responses, in order, and
    checks every request against the recorded one."""

    def __init__(self, folder):
        self.folder = folder
        self.turn = 0

    def __call__(self, request):
        self.turn += 1
        want = self.folder / ("%d-request.json" % self.turn)
        # The request as the API would get it: through JSON.
        got = json.loads(json.dumps(request))
        if UPDATE:
            want.write_text(json.dumps(got, indent=2, ensure_ascii=False) + "\n")
        assert got == json.loads(want.read_text()), "request %d differs from %s" % (self.turn, want)
        return json.loads((self.folder / ("%d-response.json" % self.turn)).read_text())

    def done(self):
        return not (self.folder / ("%d-response.json" % (self.turn + 1))).exists()


def test_anthropic_loop(client):
    replay = Replay(TESTDATA / "anthropic")
    log = io.StringIO()
    answer = agent.anthropic_loop(replay, client, "What do 3 books and 2 pens cost?", log=log)
    assert answer == "3 books and 2 pens cost 67 euros (a book is 21, a pen 2)."
    assert replay.turn == 3 and replay.done()
    # The first program failed in the tool (a plural name): its traceback
    # went back as an error; the second read both prices in one pause.
    second = json.loads((TESTDATA / "anthropic" / "2-request.json").read_text())
    result = second["messages"][-1]["content"][0]
    assert result["is_error"] is True
    assert "RuntimeError: LookupError: no such item: 'books'" in result["content"]
    third = json.loads((TESTDATA / "anthropic" / "3-request.json").read_text())
    assert json.loads(third["messages"][-1]["content"][0]["content"]) == {
        "value": 67, "stdout": "{'book': 21, 'pen': 2}\n"}


def test_openai_loop(client):
    replay = Replay(TESTDATA / "openai")
    answer = agent.openai_loop(replay, client, "What do 3 books and 2 pens cost?")
    assert answer == "3 books and 2 pens cost 67 euros."
    assert replay.turn == 2 and replay.done()
    second = json.loads((TESTDATA / "openai" / "2-request.json").read_text())
    output = second["input"][-1]
    assert output["type"] == "function_call_output" and output["call_id"] == "call_Xr7Kq2mWbN4pR9sTd"
    assert json.loads(output["output"]) == {"value": 67, "stdout": "total: 67\n"}


def test_run_python_description():
    d = agent.describe(agent.TOOLS)
    assert "shop.price(item: str) -> int" in d and "The price of one item of the shop, in euros." in d


@pytest.mark.parametrize("arguments", [None, {}, {"source": 1}])
def test_run_python_bad_arguments(arguments):
    text, is_error = agent.run_python(None, arguments)
    assert is_error and "source" in text
