from __future__ import annotations
from typing import Any, Literal, NotRequired, TypedDict

class github:
    @staticmethod
    def create_comment(issue: int, body: str, meta: dict[str, str] | None = None, **kwargs: str) -> Any:
        """Comment on an issue."""

    @staticmethod
    def get_issue(number: int, state: Literal["open", "closed"] | None = None, **kwargs: Any) -> Any:
        """Return an issue by number.

        Args:
            number: the issue number
            "repo.name" (str | None, optional): pass it as **{"repo.name": ...}
        """

    @staticmethod
    def search_issues(q: str, labels: list[str] | None = None, sort: str | None = None, **kwargs: Any) -> Any:
        """Search issues with GitHub's "q" syntax.

        Args:
            "per-page" (int, optional): pass it as **{"per-page": ...}
        """
