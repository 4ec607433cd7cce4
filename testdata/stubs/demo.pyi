from __future__ import annotations
from typing import Any, Literal, NotRequired, TypedDict

def lookup(key: str) -> Any:
    """Look up the price of an item by key.

    Args:
        key: the item, e.g. "book"
    """

class prices:
    @staticmethod
    def list(limit: int | None = None) -> Any:
        """List every item and its price, cheapest first; at most limit items when limit is given.

        Args:
            limit: how many items at most
        """
