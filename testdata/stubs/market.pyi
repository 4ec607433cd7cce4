from __future__ import annotations
from typing import Any, Literal, NotRequired, TypedDict

def lookup(key: str) -> Any:
    """Look up the price of an item by key.

    Args:
        key: the item
    """

class market:
    class fx:
        @staticmethod
        def rate(**kwargs) -> Any:
            ...

    @staticmethod
    def get_price(symbol: str, currency: Literal["USD", "EUR"] = "USD") -> Any:
        """Return the last price of symbol."""

    @staticmethod
    def history(symbol: str, days: int = 30) -> Any:
        """Daily closing prices,
        oldest first.
        """

def zeta(**kwargs) -> Any:
    """Last."""
