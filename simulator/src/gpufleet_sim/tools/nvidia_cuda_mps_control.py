"""Simulated ``nvidia-cuda-mps-control``: the MPS control daemon (``-d`` / ``-f``) and its stdin front end.

The daemon listens on a unix socket named ``control`` in ``$CUDA_MPS_PIPE_DIRECTORY`` (default /tmp/nvidia-mps),
logs to ``$CUDA_MPS_LOG_DIRECTORY/control.log`` (default /var/log/nvidia-mps) and holds the GPUs as a driver
client. Without ``-d``/``-f`` the program reads commands from stdin, sends each to the daemon and prints the
answers, as NVIDIA's does. Simulated CUDA clients connect with the hidden commands ``sim_client_connect PID UID``
and ``sim_client_disconnect PID`` (``gpusim mps-client``); the first client of a user starts an MPS server, a
child process recorded on the GPUs as the compute process ``nvidia-cuda-mps-server``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import sys
import threading
from pathlib import Path

from .. import hardware, store
from . import _common

NAME = "nvidia-cuda-mps-control"
SERVER_NAME = "nvidia-cuda-mps-server"
DEFAULT_PIPE_DIR = "/tmp/nvidia-mps"
DEFAULT_LOG_DIR = "/var/log/nvidia-mps"
NOT_RUNNING = "Cannot find MPS control daemon process"


def pipe_dir() -> Path:
    """The control pipe directory (``$CUDA_MPS_PIPE_DIRECTORY``)."""
    return Path(os.environ.get("CUDA_MPS_PIPE_DIRECTORY") or DEFAULT_PIPE_DIR)


def log_dir() -> Path:
    """The log directory (``$CUDA_MPS_LOG_DIRECTORY``)."""
    return Path(os.environ.get("CUDA_MPS_LOG_DIRECTORY") or DEFAULT_LOG_DIR)


class Daemon:
    """The control daemon's state and command interpreter."""

    def __init__(self) -> None:
        self.thread_percentage = 100.0
        self.pinned_limits: dict[str, str] = {}
        self.servers: dict[int, int] = {}  # uid -> server pid
        self.clients: dict[int, tuple[int, int]] = {}  # client pid -> (uid, server pid)
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.log = log_dir() / "control.log"

    def execute(self, line: str) -> str:
        """Run one control command; return its output (possibly empty)."""
        words = line.split()
        if not words:
            return ""
        cmd, args = words[0], words[1:]
        _common.log_line(self.log, f"User did send {line.strip()}")
        with self.lock:
            return self._dispatch(cmd, args)

    def _dispatch(self, cmd: str, args: list[str]) -> str:
        if cmd == "quit":
            self.stop.set()
            return ""
        if cmd == "get_server_list":
            return "\n".join(str(pid) for pid in self.servers.values())
        if cmd == "get_server_status" and args:
            return "ACTIVE" if int(args[0]) in self.servers.values() else "Server not found"
        if cmd == "get_client_list" and args:
            server = int(args[0])
            return "\n".join(str(c) for c, (_uid, s) in self.clients.items() if s == server)
        if cmd == "start_server" and len(args) == 2 and args[0] == "-uid":
            self._server_for(int(args[1]))
            return ""
        if cmd == "set_default_active_thread_percentage" and args:
            value = float(args[0])
            if not 0 < value <= 100:
                return "Invalid active thread percentage"
            self.thread_percentage = value
            return f"{value:.1f}"
        if cmd == "get_default_active_thread_percentage":
            return f"{self.thread_percentage:.1f}"
        if cmd == "set_default_device_pinned_mem_limit" and len(args) == 2:
            self.pinned_limits[args[0]] = args[1]
            return ""
        if cmd == "get_default_device_pinned_mem_limit" and args:
            return self.pinned_limits.get(args[0], "0")
        if cmd == "sim_client_connect" and len(args) == 2:
            pid, uid = int(args[0]), int(args[1])
            self.clients[pid] = (uid, self._server_for(uid))
            return str(self.clients[pid][1])
        if cmd == "sim_client_disconnect" and args:
            self.clients.pop(int(args[0]), None)
            return ""
        return f"Unrecognized command: {cmd}"

    def _server_for(self, uid: int) -> int:
        if uid in self.servers:
            return self.servers[uid]
        pid = os.fork()
        if pid == 0:  # the MPS server: idles until the daemon ends it; holds none of the daemon's sockets
            os.closerange(3, 65536)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            while True:
                signal.pause()
        self.servers[uid] = pid
        _common.log_line(self.log, f"Starting new server {pid} for user {uid}")
        with contextlib.suppress(store.StateError, hardware.HardwareError, OSError), store.transaction() as doc:
            for gpu in doc.get("gpus", []):
                if not gpu.get("lost"):
                    hardware.add_process_in(gpu, pid, SERVER_NAME, 25)
        return pid

    def shutdown(self) -> None:
        """End every MPS server and remove them from the GPUs."""
        for pid in self.servers.values():
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGTERM)
                os.waitpid(pid, 0)
            with contextlib.suppress(store.StateError, OSError), store.transaction() as doc:
                for gpu in doc.get("gpus", []):
                    with contextlib.suppress(hardware.HardwareError):
                        hardware.remove_process_in(gpu, pid)
        self.servers.clear()
        self.clients.clear()


def serve(foreground: bool) -> int:
    """Run the control daemon; return its exit status."""
    directory = pipe_dir()
    sock_path = directory / "control"
    pid_file = directory / f"{NAME}.pid"
    if _common.read_pid_file(pid_file):
        print("An instance of this daemon is already running", file=sys.stderr)
        return 1
    notify = None if foreground else _common.detach()
    directory.mkdir(parents=True, exist_ok=True)
    sock_path.unlink(missing_ok=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(sock_path))
    listener.listen(16)
    listener.settimeout(0.2)
    daemon = Daemon()
    _common.write_pid_file(pid_file)
    stop = _common.StopFlag()
    with contextlib.suppress(store.StateError, OSError):
        hardware.register_client(os.getpid(), NAME)
    _common.log_line(daemon.log, "Starting control daemon")
    if notify:
        notify(True)
    try:
        while not (daemon.stop.is_set() or stop.stopped):
            try:
                conn, _addr = listener.accept()
            except TimeoutError:
                continue
            with conn:
                data = b""
                while not data.endswith(b"\n"):
                    chunk = conn.recv(4096)
                    if not chunk:
                        break
                    data += chunk
                answer = daemon.execute(data.decode(errors="replace"))
                conn.sendall((answer + "\n").encode() if answer else b"")
    finally:
        daemon.shutdown()
        hardware.unregister_client(os.getpid())
        listener.close()
        sock_path.unlink(missing_ok=True)
        _common.log_line(daemon.log, "Exiting control daemon")
        pid_file.unlink(missing_ok=True)
    return 0


def send(command: str) -> str:
    """Send one command to the running daemon and return its answer.

    Raises:
        ToolError: no daemon listens on the control pipe.
    """
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(str(pipe_dir() / "control"))
    except OSError as exc:
        sock.close()
        raise _common.ToolError(NOT_RUNNING, 1) from exc
    with sock:
        sock.sendall(command.strip().encode() + b"\n")
        sock.shutdown(socket.SHUT_WR)
        data = b""
        while chunk := sock.recv(4096):
            data += chunk
    return data.decode(errors="replace").rstrip("\n")


def client(lines: list[str]) -> int:
    """The stdin front end: one command per line."""
    for line in lines:
        if not line.strip():
            continue
        answer = send(line)
        if answer:
            print(answer)
    return 0


def run(argv: list[str]) -> int:
    """Run ``nvidia-cuda-mps-control``; return the exit status."""
    p = argparse.ArgumentParser(prog=NAME, description="CUDA MPS control daemon (simulated)")
    p.add_argument("-d", dest="daemon", action="store_true")
    p.add_argument("-f", dest="foreground", action="store_true")
    p.add_argument("-q", dest="quit", action="store_true")
    args = p.parse_args(argv)
    if args.daemon or args.foreground:
        return serve(args.foreground)
    if args.quit:
        return client(["quit"])
    return client(sys.stdin.read().splitlines())


def main(argv: list[str] | None = None, version: str | None = None) -> int:
    """Entry point of ``nvidia-cuda-mps-control``."""
    return _common.run_main(run, argv)


if __name__ == "__main__":
    sys.exit(main())
