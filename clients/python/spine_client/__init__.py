"""spine_client: a client of Spine's HTTP API (spine serve) whose programs
call tools answered by plain Python functions of the caller's process.

    import spine_client

    def get_weather(city: str) -> dict:
        \"\"\"The weather in a city.\"\"\"
        return {"city": city, "temp": 20}

    result = spine_client.run("get_weather('Paris')['temp'] * 2", tools=[get_weather])
    result.value  # 40

No dependencies outside the standard library; Python 3.9 or later.
"""

from ._core import Result
from .aio import AsyncClient, AsyncSession
from .approvals import Approval
from .client import DEFAULT_URL, Client, Session
from .errors import ApprovalRequired, ProgramError, SpineError
from .tools import Tool, schema_of, tool

__all__ = [
    "run", "Client", "Session", "AsyncClient", "AsyncSession", "Result",
    "SpineError", "ProgramError", "ApprovalRequired", "Approval", "Tool", "tool", "schema_of", "DEFAULT_URL",
]

__version__ = "0.1.0"


def run(source, tools=None, inputs=None, files=None, timeout=None, early_reads=None, base_url=None, token=None, approve=None):
    """Runs source on the server at base_url ($SPINE_URL, else
    http://127.0.0.1:8080) with a Client of its own: Client.run."""
    with Client(base_url, token) as client:
        return client.run(source, tools=tools, inputs=inputs, files=files, timeout=timeout, early_reads=early_reads,
                          approve=approve)
