from __future__ import annotations
from typing import Any, Literal, NotRequired, TypedDict

class market:
    class fx:
        @staticmethod
        def pairs() -> Any:
            """Every pair quoted."""

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

        At most a year.

        Args:
            symbol: the ticker
            days: how many days, counted back from today
        """
