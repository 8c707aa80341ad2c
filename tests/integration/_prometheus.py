"""A real Prometheus server for the host tests: Debian's binary that scripts/bootstrap.sh unpacks, and its HTTP API.

:class:`Prometheus` starts ``build/prometheus/usr/bin/prometheus`` (never installed on this machine) on 127.0.0.1
with a free port, its own storage directory and log file, waits until ``/-/ready`` answers, and stops it (SIGTERM,
then SIGKILL) in :meth:`Prometheus.stop`. :meth:`Prometheus.api` returns the ``data`` of an API answer and fails the
test with Prometheus' own error when the answer is not ``"success"``. :func:`poll` repeats a reading until a
condition holds and fails with the last reading when it never does: no fixed sleeps.
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from gpufleet_lab.podman import project_root

ROOT = project_root()
PROMETHEUS = ROOT / "build" / "prometheus" / "usr" / "bin" / "prometheus"
PROMTOOL = ROOT / "build" / "prometheus" / "usr" / "bin" / "promtool"

T = TypeVar("T")


def free_port() -> int:
    """A TCP port nothing listens on at 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def poll(read: Callable[[], T], done: Callable[[T], bool], timeout: float, what: str,
         interval: float = 0.5) -> T:
    """``read()`` until ``done(reading)``; fail with ``what`` and the last reading after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        reading = read()
        if done(reading):
            return reading
        if time.monotonic() > deadline:
            shown = json.dumps(reading, indent=1, sort_keys=True, default=str)
            pytest.fail(f"{what}: not within {timeout:.0f} s; Prometheus last returned:\n{shown[-6000:]}")
        time.sleep(interval)


class Prometheus:
    """One Prometheus server process with ``config`` (a file) and storage under ``work``."""

    def __init__(self, config: Path, work: Path) -> None:
        assert PROMETHEUS.is_file(), (f"{PROMETHEUS} is missing: run scripts/bootstrap.sh (it unpacks Debian's "
                                      "prometheus package into build/prometheus)")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = work / "prometheus.log"
        self._log = self.log.open("w", encoding="utf-8")
        self.proc = subprocess.Popen(
            [str(PROMETHEUS), f"--config.file={config}", f"--storage.tsdb.path={work / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
            stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"prometheus exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as answer:
                    if answer.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)
        pytest.fail(f"prometheus did not become ready on {self.url} within {timeout:.0f} s:\n{self.log_tail()}")

    def log_tail(self) -> str:
        self._log.flush()
        return "\n".join(self.log.read_text(encoding="utf-8", errors="replace").splitlines()[-30:])

    def api(self, path: str, **params: str | float) -> Any:
        """GET ``/api/v1/<path>`` and return its ``data``; fail with Prometheus' error otherwise."""
        query = urllib.parse.urlencode({k: str(v) for k, v in params.items()})
        url = f"{self.url}/api/v1/{path}" + (f"?{query}" if query else "")
        try:
            with urllib.request.urlopen(url, timeout=15) as answer:
                doc = json.loads(answer.read())
        except urllib.error.HTTPError as exc:
            doc = json.loads(exc.read() or b"{}")
        assert doc.get("status") == "success", f"GET {url}: {doc}"
        return doc["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The instant vector of ``expr`` now (a list of ``{"metric": ..., "value": [t, "v"]}``)."""
        data = self.api("query", query=expr)
        assert data["resultType"] == "vector", f"{expr}: a {data['resultType']}, not a vector"
        return list(data["result"])

    def alerts(self) -> list[dict[str, Any]]:
        """Every pending or firing alert (``labels``, ``annotations``, ``state``, ``activeAt``, ``value``)."""
        return list(self.api("alerts")["alerts"])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._log.close()
