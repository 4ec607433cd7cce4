"""An agent loop whose model writes Python that calls this process's tools.

The model has one tool, run_python. Each call of it becomes a run on a
spine serve, through spine_client: the program runs in Spine's sandbox, and
the tools it calls (here shop.price, a plain function of this file) are
answered by this process. The run's value and output, or its traceback, go
back to the model as the tool's result, until the model answers.

Two message shapes, standard library only (no SDK):

    ANTHROPIC_API_KEY=... python3 agent.py anthropic "What do 3 books and 2 pens cost?"
    OPENAI_API_KEY=... python3 agent.py openai "What do 3 books and 2 pens cost?"

anthropic is the Messages API (tool_use blocks answered by tool_result
blocks, is_error for a failed program); openai is the Responses API
(function_call items answered by function_call_output items). The server is
$SPINE_URL (default http://127.0.0.1:8080; start one with spine serve) and
$SPINE_TOKEN; --base-url points the model calls at any server that speaks
the API.
"""

import argparse
import inspect
import json
import os
import sys
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # spine_client from this folder's parent, when not installed

from spine_client import Client, ProgramError, SpineError, tool  # noqa: E402

CATALOGUE = {"book": 21, "pen": 2, "lamp": 35}


@tool(read_only=True, name="shop.price")
def price(item: str) -> int:
    """The price of one item of the shop, in euros.

    Args:
        item: the item's name, singular: "book"
    """
    if item not in CATALOGUE:
        raise LookupError("no such item: %r (the shop has %s)" % (item, ", ".join(sorted(CATALOGUE))))
    return CATALOGUE[item]


TOOLS = [price]

RUN_PYTHON_SCHEMA = {
    "type": "object",
    "properties": {"source": {"type": "string", "description": "The Python 3.11 program."}},
    "required": ["source"],
    "additionalProperties": False,
}


def describe(tools):
    """run_python's description: the sandbox, and each tool as a stub."""
    lines = [
        "Runs a Python 3.11 program in a sandbox and returns the value of its last "
        "expression and what it printed. The program may call these functions, "
        "answered by the application (a read-only one may be called many times in a loop):",
        "",
    ]
    for t in tools:
        lines.append("%s%s" % (t.name, inspect.signature(t.fn)))
        lines.append('    """%s"""' % t.description)
    return "\n".join(lines)


def run_python(client, arguments, tools=TOOLS):
    """Runs the model's run_python call; returns (text for the model,
    whether it is an error)."""
    source = arguments.get("source") if isinstance(arguments, dict) else None
    if not isinstance(source, str):
        return 'run_python needs {"source": "<a Python program>"}', True
    try:
        res = client.run(source, tools=tools)
    except ProgramError as e:
        return _with_output(e.traceback.rstrip("\n"), e.stdout, e.stderr), True
    except SpineError as e:
        return _with_output("%s: %s" % (e.kind, e.message), e.stdout, e.stderr), True
    return json.dumps({"value": res.value, "stdout": res.stdout}), False


def _with_output(text, stdout, stderr):
    for name, out in (("stdout", stdout), ("stderr", stderr)):
        if out:
            text += "\n\n%s:\n%s" % (name, out.rstrip("\n"))
    return text


def anthropic_loop(call_model, client, prompt, model="claude-sonnet-5-5", max_turns=8, log=None):
    """The Messages API's loop: returns the model's answer."""
    request = {
        "model": model,
        "max_tokens": 4096,
        "tools": [{"name": "run_python", "description": describe(TOOLS), "input_schema": RUN_PYTHON_SCHEMA}],
        "messages": [{"role": "user", "content": prompt}],
    }
    for _ in range(max_turns):
        msg = call_model(request)
        request["messages"].append({"role": "assistant", "content": msg["content"]})
        results = []
        for block in msg["content"]:
            if block.get("type") != "tool_use":
                continue
            text, is_error = 'no tool %r: the only tool is run_python' % block.get("name"), True
            if block.get("name") == "run_python":
                text, is_error = run_python(client, block.get("input"))
            _log(log, block.get("input"), text)
            results.append({"type": "tool_result", "tool_use_id": block["id"], "content": text, "is_error": is_error})
        if not results:
            return "\n".join(b["text"] for b in msg["content"] if b.get("type") == "text")
        request["messages"].append({"role": "user", "content": results})
    raise RuntimeError("the model did not answer within %d turns" % max_turns)


def openai_loop(call_model, client, prompt, model="gpt-5", max_turns=8, log=None):
    """The Responses API's loop: returns the model's answer."""
    request = {
        "model": model,
        "tools": [{"type": "function", "name": "run_python", "description": describe(TOOLS),
                   "parameters": RUN_PYTHON_SCHEMA, "strict": True}],
        "input": [{"role": "user", "content": prompt}],
    }
    for _ in range(max_turns):
        resp = call_model(request)
        request["input"].extend(resp["output"])
        outputs = []
        for item in resp["output"]:
            if item.get("type") != "function_call":
                continue
            text = "no tool %r: the only tool is run_python" % item.get("name")
            if item.get("name") == "run_python":
                try:
                    arguments = json.loads(item.get("arguments") or "{}")
                except ValueError as e:
                    arguments = None
                    text = "the arguments are not JSON: %s" % e
                if arguments is not None:
                    text, _ = run_python(client, arguments)  # the API has no error flag: the text says it
            _log(log, item.get("arguments"), text)
            outputs.append({"type": "function_call_output", "call_id": item["call_id"], "output": text})
        if not outputs:
            return "\n".join(c["text"] for item in resp["output"] if item.get("type") == "message"
                             for c in item.get("content", []) if c.get("type") == "output_text")
        request["input"].extend(outputs)
    raise RuntimeError("the model did not answer within %d turns" % max_turns)


def _log(log, arguments, text):
    if log is not None:
        print("run_python %s\n-> %s" % (json.dumps(arguments), text), file=log)


def http_model(url, headers):
    """A model call: POSTs the request as JSON to url, returns the answer."""

    def call(request):
        req = urllib.request.Request(url, data=json.dumps(request).encode(), method="POST",
                                     headers=dict(headers, **{"Content-Type": "application/json"}))
        with urllib.request.urlopen(req, timeout=300) as resp:
            return json.load(resp)

    return call


def main(argv=None):
    p = argparse.ArgumentParser(description="An agent loop with run_python on a spine serve.")
    p.add_argument("api", choices=["anthropic", "openai"])
    p.add_argument("prompt", nargs="?", default="What do 3 books and 2 pens cost?")
    p.add_argument("--base-url", help="the API's base URL (default $ANTHROPIC_BASE_URL / $OPENAI_BASE_URL, else the vendor's)")
    p.add_argument("--model")
    p.add_argument("--max-turns", type=int, default=8)
    args = p.parse_args(argv)
    if args.api == "anthropic":
        base = args.base_url or os.environ.get("ANTHROPIC_BASE_URL") or "https://api.anthropic.com"
        call = http_model(base.rstrip("/") + "/v1/messages", {
            "x-api-key": os.environ.get("ANTHROPIC_API_KEY", ""), "anthropic-version": "2023-06-01"})
        loop, kwargs = anthropic_loop, {"model": args.model or "claude-sonnet-5-5"}
    else:
        base = args.base_url or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"
        call = http_model(base.rstrip("/") + "/responses", {"Authorization": "Bearer " + os.environ.get("OPENAI_API_KEY", "")})
        loop, kwargs = openai_loop, {"model": args.model or "gpt-5"}
    with Client() as client:
        print(loop(call, client, args.prompt, max_turns=args.max_turns, log=sys.stderr, **kwargs))


if __name__ == "__main__":
    main()
