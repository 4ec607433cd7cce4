from __future__ import annotations
from typing import Any, Literal, NotRequired, TypedDict
