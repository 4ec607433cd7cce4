"""The HTTP under both clients: http.client connections kept alive in a
small pool, safe to use from several threads."""

import http.client
import json
import select
import socket
import threading
import urllib.parse

from .errors import error_of

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


class Transport:
    """Requests to one server: base_url (http or https, with an optional
    path prefix), a bearer token, a socket timeout in seconds (None: wait
    as long as the server takes; the server bounds every run)."""

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
            if aborter is not None:
                if conn.sock is None:
                    conn.connect()
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
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)
