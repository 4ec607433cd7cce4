"""The tests' spine serve: built from this repository (or $SPINE_BIN), started
on a free loopback port with the demo tools and a token, stopped at the end."""

import contextlib
import os
import pathlib
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

import pytest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # spine_client, without installing it
REPO = HERE.parent.parent.parent
TOKEN = "spine-client-python-tests-token"

# A run id (service/runid.go): "run_", the replica's name and a dot when the
# server has one, the process's incarnation (8 hex digits), a dot, 32 hex.
RUN_ID = re.compile(r"run_(?:[A-Za-z0-9-]{1,63}\.)?[0-9a-f]{8}\.[0-9a-f]{32}")


class Server:
    def __init__(self, url, proc, log):
        self.url, self.proc, self.log = url, proc, log
        self.drained = False

    def drain(self):
        """Sends SIGTERM and returns once the server drains: it says it is
        shutting down after Server.Drain, which refuses new requests 503
        closed and hands the paused runs a session store keeps over. Its
        listener stays open for --drain-delay; a second signal (the end of
        serve) then ends it at once."""
        self.drained = True
        self.proc.send_signal(signal.SIGTERM)
        while not any("shutting down" in line for line in list(self.log)):
            if self.proc.poll() is not None:
                pytest.fail("spine serve exited (%s) before it drained:\n%s" % (self.proc.returncode, "".join(self.log)))
            time.sleep(0.01)


@pytest.fixture(scope="session")
def spine_bin():
    """The spine command: $SPINE_BIN, else built from this repository."""
    if os.environ.get("SPINE_BIN"):
        yield os.environ["SPINE_BIN"]
        return
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "spine")
        subprocess.run(["go", "build", "-o", out, "./cmd/spine"], cwd=REPO, check=True)
        yield out


@contextlib.contextmanager
def serve(binary, *flags):
    """A spine serve on a free loopback port, with the demo tools, the token
    TOKEN and flags; stopped (SIGTERM, exit code 0; after Server.drain,
    ended by that second signal) at the end. It gets
    this process's environment without its SPINE_* variables, which would
    change it (SPINE_REPLICA, SPINE_CONFIG, SPINE_TOKEN, ...)."""
    with tempfile.TemporaryDirectory() as tmp:
        token_file = os.path.join(tmp, "token")
        with open(token_file, "w") as f:
            f.write(TOKEN)
        os.chmod(token_file, 0o600)
        env = {k: v for k, v in os.environ.items() if not k.startswith("SPINE_")}
        args = [binary, "serve", "--listen", "127.0.0.1:0", "--demo-tools", "--drain-delay=0",
                "--token-file", token_file] + list(flags)
        proc = subprocess.Popen(args, stderr=subprocess.PIPE, text=True, env=env)
        log = []
        url = None
        for line in proc.stderr:
            log.append(line)
            if "listening on http://" in line:
                url = "http://" + line.split("listening on http://", 1)[1].split()[0]
                break
        if url is None:
            proc.wait()
            pytest.fail("spine serve did not start (exit %s):\n%s" % (proc.returncode, "".join(log)))
        drain = threading.Thread(target=lambda: log.extend(proc.stderr), daemon=True)
        drain.start()
        srv = Server(url, proc, log)
        try:
            yield srv
        finally:
            proc.send_signal(signal.SIGTERM)
            code = proc.wait()
            drain.join()
            ok = (0, -signal.SIGTERM) if srv.drained else (0,)
            assert code in ok, "spine serve exited %d:\n%s" % (code, "".join(log))


@pytest.fixture(scope="session")
def server(spine_bin):
    with serve(spine_bin, "--slots", "8", "--paused", "16", "--replica", "t1") as s:
        yield s


@pytest.fixture
def client(server):
    from spine_client import Client

    with Client(server.url, token=TOKEN) as c:
        yield c
