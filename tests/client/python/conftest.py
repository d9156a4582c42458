"""Fixtures for the Python client's tests: a real ampd on a free loopback port.

The binary comes from $AMPD_BINARY (Bazel sets it to the runfile), else
bazel-bin/server/ampd in the repository. Run outside Bazel with:
    bazel build //server:ampd && python3 -m pytest tests/client/python
"""
import os
import signal
import subprocess
import tempfile
import time

import pytest

from ampd_client import Client

HERE = os.path.dirname(os.path.abspath(__file__))
# tests/client/python -> the repository (or the runfiles tree under Bazel).
REPO = os.path.normpath(os.path.join(HERE, "..", "..", ".."))


def ampd_binary():
    path = os.environ.get("AMPD_BINARY") or os.path.join(REPO, "bazel-bin", "server", "ampd")
    return os.path.abspath(path)


class AmpdServer:
    """One ampd process with its own data dir, on a port it picks (port 0)."""

    def __init__(self, workdir, extra_flags=()):
        binary = ampd_binary()
        if not os.access(binary, os.X_OK):
            pytest.fail("no ampd binary at %s: run `bazel build //server:ampd` or set "
                        "AMPD_BINARY" % binary, pytrace=False)
        os.makedirs(workdir, exist_ok=True)
        self.workdir = workdir
        self.log_path = os.path.join(workdir, "ampd.log")
        port_file = os.path.join(workdir, "port")
        args = [binary, "--listen=127.0.0.1:0", "--data_dir=" + os.path.join(workdir, "data"),
                "--port_file=" + port_file, "--heartbeat_interval_ms=100"] + list(extra_flags)
        self._log = open(self.log_path, "wb")
        self.process = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL)
        self.port = 0
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with open(port_file) as f:
                    self.port = int(f.read().strip() or 0)
            except (OSError, ValueError):
                pass
            if self.port > 0:
                return
            if self.process.poll() is not None:
                break
            time.sleep(0.02)
        self.stop()
        pytest.fail("ampd did not start (exit %s):\n%s" % (self.process.returncode, self.log()),
                    pytrace=False)

    @property
    def address(self):
        return "127.0.0.1:%d" % self.port

    def log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def stop(self):
        """SIGTERM, then SIGKILL if it has not exited within 10 s."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()


@pytest.fixture(scope="session")
def ampd():
    workdir = tempfile.mkdtemp(prefix="ampd_pytest_", dir=os.environ.get("TEST_TMPDIR"))
    # Two workers: a long job under test never holds up the short ones.
    server = AmpdServer(workdir, ["--cpu_workers=2"])
    yield server
    server.stop()


@pytest.fixture
def client(ampd):
    with Client(ampd.address, timeout=30) as c:
        yield c
    # Nothing a test started may keep a worker busy for the next test.
    with Client(ampd.address, timeout=30) as c:
        for job in c.list(state=["QUEUED", "RUNNING"]):
            try:
                job.cancel()
            except Exception:  # noqa: BLE001 - it may have ended meanwhile
                pass
