"""The exceptions of spine_client: every answer of the server that is not a
success, each carrying the server's error object."""

__all__ = ["SpineError", "ProgramError", "ApprovalRequired"]


class SpineError(Exception):
    """An answer of the server that is not a success: a refused request
    (400, 404, 429, ...) or a run that did not end normally (408, 422, 500,
    ...).

    status is the HTTP status; kind, message and error the server's error
    object (``error`` as it came: kind, type, message, line, traceback);
    response the whole answer when it was JSON (a run's answer holds its
    stdout and stderr so far); retry_after the seconds of a Retry-After
    header (429, 503), else None.

    run_id is the run's id when the run had client tools (or could wait
    for approvals) and got that far (None for a refusal of its first
    request); an error that answered its tool results carries results too,
    those the client last sent, and one that answered its decisions on
    approvals decisions. Those of a run still paused (429 overloaded or 503
    closed after the client's retries) can be sent again with
    Client.resume(run_id, results, tools) or Client.decide(run_id,
    decisions, tools). A continuation that reached a replica other than the
    run's is kind "run_elsewhere" (421), one that reached its replica after
    it restarted "run_lost" (410): the run ended with its replica, start it
    again.
    """

    def __init__(self, status, error, response=None, retry_after=None):
        self.status = status
        self.error = dict(error or {})
        self.kind = self.error.get("kind", "")
        self.message = self.error.get("message", "")
        self.response = response if response is not None else {}
        self.retry_after = retry_after
        self.run_id = self.response.get("run_id")
        self.results = None
        self.decisions = None
        super().__init__("%d %s: %s" % (status, self.kind or "error", self.message))

    @property
    def stdout(self):
        """What the program printed before it failed ("" for a refusal)."""
        return self.response.get("stdout", "")

    @property
    def stderr(self):
        return self.response.get("stderr", "")


class ProgramError(SpineError):
    """The program raised an uncaught exception (422, kind "python"): type
    is the exception's class, line the program's line it points to (0 when
    unknown), traceback the formatted traceback."""

    @property
    def type(self):
        return self.error.get("type", "")

    @property
    def line(self):
        return self.error.get("line", 0)

    @property
    def traceback(self):
        return self.error.get("traceback", "")


class ApprovalRequired(SpineError):
    """A run waits for a person's approval of a tool call (status
    "approval_required", docs/http.md "Approvals that wait") and the run
    had no approve callback to ask. The run stays paused until the
    server's --tool-wait: decide it with Client.decide(run_id, [{"id":
    a.id, "allow": True or False, "reason": "..."} for a in approvals]),
    which drives it on as run does. approvals are the Approvals it waits
    for; status is the pause's (200), kind "approval_required", response
    the pause (stdout and stderr so far).
    """

    def __init__(self, answer, approvals, message=None):
        calls = ", ".join("%s (%s)" % (a.tool, a.id) for a in approvals) or "no call"
        if message is None:
            message = ("run %s waits for a person's approval of %s: pass approve= to decide it, or answer "
                       "later with decide(run_id, decisions)" % (answer.get("run_id"), calls))
        super().__init__(200, {"kind": "approval_required", "message": message}, answer)
        self.approvals = approvals


def error_of(status, body, retry_after=None):
    """The exception for an answer of status whose body is body (a dict
    when it was JSON, else the text)."""
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        cls = ProgramError if body["error"].get("kind") == "python" else SpineError
        return cls(status, body["error"], body, retry_after)
    text = body if isinstance(body, str) else repr(body)
    if len(text) > 500:
        text = text[:500] + "..."
    return SpineError(status, {"kind": "http", "message": text or "HTTP %d with no body" % status}, None, retry_after)
