"""Tools from plain functions: schemas from type hints and docstrings (no
server needed)."""

import dataclasses
import enum
import typing
from typing import Dict, List, Literal, Optional, Tuple, Union

import pytest

from spine_client import Tool, schema_of, tool
from spine_client._core import error_result, run_body, value_result
from spine_client.tools import as_tools, parse_docstring


def test_schema_from_hints_and_google_docstring():
    def search(query: str, limit: int = 10, tags: Optional[List[str]] = None, exact: bool = False) -> List[Dict[str, float]]:
        """Searches the catalogue.

        Longer text the description leaves out.

        Args:
            query: what to look for,
                in a few words
            limit (int): at most this many
        Returns:
            the matches
        """

    t = Tool(search)
    assert t.definition() == {
        "name": "search",
        "description": "Searches the catalogue.",
        "input_schema": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "what to look for, in a few words"},
                "limit": {"type": "integer", "description": "at most this many", "default": 10},
                "tags": {"anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}], "default": None},
                "exact": {"type": "boolean", "default": False},
            },
            "required": ["query"],
            "additionalProperties": False,
        },
        "output_schema": {"type": "array", "items": {"type": "object", "additionalProperties": {"type": "number"}}},
    }


def test_rest_docstring_and_multiline_first_paragraph():
    assert parse_docstring("""Adds two
    numbers.

    :param a: the first
        one
    :param int b: the second
    :returns: the sum
    """) == ("Adds two numbers.", {"a": "the first one", "b": "the second"})
    assert parse_docstring(None) == ("", {})


def test_decorator_and_names():
    @tool(read_only=True, name="shop.price")
    def price(item: str) -> float:
        """The price of an item."""
        return 1.5

    assert price.name == "shop.price" and price.read_only and price("x") == 1.5
    assert price.definition()["read_only"] is True

    @tool
    def plain(x):
        return x

    assert plain.name == "plain" and not plain.read_only and plain.description == ""
    assert plain.definition()["input_schema"]["properties"] == {"x": {}}
    tools = as_tools({"crm.find": plain, "other": price})
    assert sorted(tools) == ["crm.find", "other"] and tools["other"].read_only
    assert list(as_tools([plain, price])) == ["plain", "shop.price"]
    with pytest.raises(ValueError, match="given twice"):
        as_tools([plain, plain])
    with pytest.raises(ValueError, match="needs a name"):
        as_tools([lambda x: x])
    assert list(as_tools({"inc": lambda x: x + 1})) == ["inc"]


def test_refused_at_setup():
    def varargs(*items: str):
        pass

    with pytest.raises(TypeError, match=r"\*items"):
        Tool(varargs)
    with pytest.raises(TypeError):
        Tool(42)


def test_kwargs_opens_the_schema():
    def f(a: int, **rest):
        pass

    s = Tool(f).input_schema
    assert "additionalProperties" not in s and s["required"] == ["a"]


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Point(typing.TypedDict):
    x: float
    y: float


@dataclasses.dataclass
class Item:
    name: str
    price: float = 0.0


@pytest.mark.parametrize("hint, want", [
    (str, {"type": "string"}),
    (float, {"type": "number"}),
    (type(None), {"type": "null"}),
    (typing.Any, {}),
    (list, {"type": "array"}),
    (dict, {"type": "object"}),
    (Optional[int], {"type": ["integer", "null"]}),
    (Union[int, str], {"anyOf": [{"type": "integer"}, {"type": "string"}]}),
    (Literal["a", 1], {"enum": ["a", 1]}),
    (Tuple[int, ...], {"type": "array", "items": {"type": "integer"}}),
    (Tuple[int, str], {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}], "minItems": 2, "maxItems": 2}),
    (typing.Set[str], {"type": "array", "items": {"type": "string"}}),
    (Color, {"enum": ["red", "blue"]}),
    (Point, {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}}, "required": ["x", "y"]}),
    (Item, {"type": "object", "properties": {"name": {"type": "string"}, "price": {"type": "number"}}, "required": ["name"]}),
    (typing.Annotated[int, "a count"], {"type": "integer", "description": "a count"}),
])
def test_schema_of(hint, want):
    assert schema_of(hint) == want


def test_bind_positional_only():
    def f(a, /, b=1):
        return a, b

    t = Tool(f)
    args, kwargs = t.bind({"a": 1, "b": 2})
    assert args == [1] and kwargs == {"b": 2} and f(*args, **kwargs) == (1, 2)
    with pytest.raises(TypeError, match="JSON object"):
        t.bind([1])


def test_values_and_errors_sent():
    assert value_result("call_1", (1, Color.RED, Item("pen"))) == {"id": "call_1", "value": [1, "red", {"name": "pen", "price": 0.0}]}
    bad = value_result("call_2", float("nan"))
    assert bad["id"] == "call_2" and bad["error"]["type"] == "TypeError" and "cannot be sent" in bad["error"]["message"]
    assert error_result("call_3", KeyError("k")) == {"id": "call_3", "error": {"message": "'k'", "type": "KeyError"}}
    assert error_result("call_4", ValueError())["error"]["message"] == "ValueError"


def test_run_body():
    @tool(read_only=True)
    def r() -> int:
        """Reads."""
        return 1

    body, tools = run_body("1", [r], {"a": 1}, {"x.txt": "hé", "y": b"\x00"}, 1.5, None)
    assert body["timeout_ms"] == 1500 and body["early_reads"] is True and body["inputs"] == {"a": 1}
    assert body["files"] == [{"name": "x.txt", "data": "aMOp"}, {"name": "y", "data": "AA=="}]
    assert list(tools) == ["r"] and body["tools"][0]["read_only"] is True
    body, _ = run_body("1", None, None, None, None, None)
    assert body == {"source": "1"}
    for bad in [(1, None, None, None), ("1", None, [1], None), ("1", None, None, {"f": 1})]:
        with pytest.raises(TypeError):
            run_body(bad[0], bad[1], bad[2], bad[3], None, None)
