"""The HTTP under both clients: http.client connections kept alive in a
small pool, safe to use from several threads."""

import http.client
import json
import selectors
import socket
import threading
import urllib.parse

from .errors import SpineError, error_of

__all__ = ["Transport"]

USER_AGENT = "spine-client-python"


class Aborter:
    """Lets another thread stop a request in flight by shutting its
    connection down: the server sees its client go away and stops the run."""

    def __init__(self):
        self._lock = threading.Lock()
        self._conn = None
        self.aborted = False

    def _attach(self, conn):
        with self._lock:
            self._conn = conn
            if self.aborted:
                _shutdown(conn)

    def abort(self):
        with self._lock:
            self.aborted = True
            if self._conn is not None:
                _shutdown(self._conn)


def _shutdown(conn):
    sock = getattr(conn, "sock", None)
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


# TCP keepalive on every connection: a request may wait as long as its run
# takes (the socket has no timeout by default), so a server whose host or
# network went away without a word is found out by the kernel's probes:
# the first after KEEPALIVE_IDLE seconds of silence, then one every
# KEEPALIVE_INTERVAL, the connection reset after KEEPALIVE_COUNT unanswered
# (a minute in all). A server that is there answers the probes however long
# its run. Where there is TCP_USER_TIMEOUT (Linux), data sent and not
# acknowledged for UNACKED_TIMEOUT_MS resets the connection too (probes are
# not sent while a request's body is unacknowledged).
KEEPALIVE_IDLE = 30
KEEPALIVE_INTERVAL = 10
KEEPALIVE_COUNT = 3
UNACKED_TIMEOUT_MS = 60000


def _keepalive(sock):
    """Turns TCP keepalive on for sock, with this module's timing where the
    platform lets it be set (Linux, macOS, Windows 10 and later)."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    except OSError:
        return
    # macOS names the idle time TCP_KEEPALIVE.
    idle = getattr(socket, "TCP_KEEPIDLE", None) or getattr(socket, "TCP_KEEPALIVE", None)
    for opt, value in ((idle, KEEPALIVE_IDLE),
                       (getattr(socket, "TCP_KEEPINTVL", None), KEEPALIVE_INTERVAL),
                       (getattr(socket, "TCP_KEEPCNT", None), KEEPALIVE_COUNT),
                       (getattr(socket, "TCP_USER_TIMEOUT", None), UNACKED_TIMEOUT_MS)):
        if opt is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, opt, value)
            except OSError:
                pass


class Transport:
    """Requests to one server: base_url (http or https, with an optional
    path prefix), a bearer token, a socket timeout in seconds (None: wait
    as long as the server takes; the server bounds every run, and TCP
    keepalive finds a server gone silent). Redirects are not followed: a
    3xx answer is a SpineError, so that a run's source, inputs and files
    never go to another address than base_url."""

    def __init__(self, base_url, token=None, timeout=None, max_idle=8):
        u = urllib.parse.urlsplit(base_url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError("base_url must be an http:// or https:// URL, not %r" % (base_url,))
        self._https = u.scheme == "https"
        self._host = u.hostname
        self._port = u.port
        self._prefix = u.path.rstrip("/")
        self._token = token
        self._timeout = timeout
        self._idle = []
        self._max_idle = max_idle
        self._lock = threading.Lock()
        self._closed = False

    def _connection(self):
        with self._lock:
            if self._closed:
                raise RuntimeError("the client is closed")
            while self._idle:
                conn = self._idle.pop()
                if not _dropped(conn):
                    return conn
                conn.close()
        cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        return cls(self._host, self._port, timeout=self._timeout)

    def _release(self, conn):
        with self._lock:
            if not self._closed and len(self._idle) < self._max_idle:
                self._idle.append(conn)
                return
        conn.close()

    def request(self, method, path, body=None, content_type=None, aborter=None):
        """Sends one request; returns (status, headers, body bytes). Headers
        are a dict with lower-case names."""
        headers = {"User-Agent": USER_AGENT, "Accept": "application/json"}
        if self._token:
            headers["Authorization"] = "Bearer " + self._token
        if content_type:
            headers["Content-Type"] = content_type
        conn = self._connection()
        try:
            if conn.sock is None:
                conn.connect()
                _keepalive(conn.sock)
            if aborter is not None:
                aborter._attach(conn)
            conn.request(method, self._prefix + path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
        except BaseException:
            conn.close()
            raise
        if resp.will_close:
            conn.close()
        else:
            self._release(conn)
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data

    def json(self, method, path, payload=None, aborter=None):
        """Sends payload as JSON (None: no body) and returns the answer's
        JSON; an answer of 400 or more raises SpineError."""
        body = None if payload is None else json.dumps(payload).encode()
        status, headers, data = self.request(method, path, body, "application/json" if body is not None else None, aborter)
        return self.decode(status, headers, data)

    @staticmethod
    def decode(status, headers, data):
        """The JSON of an answer, or the SpineError it is."""
        if 300 <= status < 400:
            raise redirect_error(status, headers)
        try:
            answer = json.loads(data) if data else None
        except ValueError:
            answer = data.decode("utf-8", "replace")
            if status < 400:  # a proxy's page, not the server's answer
                raise error_of(status, "an answer that is not JSON: " + answer)
        if status >= 400:
            raise error_of(status, answer, _retry_after(headers))
        return answer

    def close(self):
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


def redirect_error(status, headers):
    """The SpineError of a 3xx answer, which is never followed: a proxy in
    front of the server that sends a request elsewhere would have it send
    the run's source, inputs, files and token there."""
    where = headers.get("location") or "nowhere"
    return SpineError(status, {"kind": "http", "message": (
        "a redirect to %s, which the client does not follow (a run's request would go "
        "there whole): point base_url at the server itself" % where)})


def _retry_after(headers):
    try:
        return float(headers.get("retry-after", ""))
    except ValueError:
        return None


def _dropped(conn):
    """Whether a kept-alive connection was closed by the server: an idle
    connection that can be read holds only its end."""
    sock = conn.sock
    if sock is None:
        return True
    # A selector, not select.select, which refuses a descriptor of 1024 or
    # more (a process with many files open).
    try:
        with selectors.DefaultSelector() as sel:
            sel.register(sock, selectors.EVENT_READ)
            return bool(sel.select(0))
    except (OSError, ValueError):
        return True
