"""Simulated ``nvidia-imex``: the IMEX daemon of a GB200/GB300 NVL72 compute tray, talking to its peers over real TCP.

Like NVIDIA's (IMEX guide, "IMEX Service Config Options" and "Connections, Quorum, and Clean up",
https://docs.nvidia.com/multi-node-nvlink-systems/imex-guide/config.html) it reads ``/etc/nvidia-imex/config.cfg``
(``KEY=VALUE``) and the node file named by ``IMEX_NODE_CONFIG_FILE`` (one IP address per line: the NVLink domain),
listens for its peers on ``BIND_INTERFACE_IP:SERVER_PORT`` (default port 50000; an empty bind address is the first
node-file address this host can bind), connects to every other node on the same port and keeps retrying the ones
that are not there yet, and serves ``nvidia-imex-ctl`` on ``IMEX_CMD_BIND_INTERFACE_IP:IMEX_CMD_PORT`` when
``IMEX_CMD_ENABLED=1``. It refuses a driver of another version (the daemon is built for one driver release).

A peer is READY when its daemon answers on its lab address; a stopped daemon or a stopped host is UNAVAILABLE within
about :data:`PEER_TIMEOUT` seconds. The peer protocol is the simulator's own (one JSON line each way per second),
not NVIDIA's gRPC.
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import json
import os
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

from . import _common

NAME = "nvidia-imex"
DEFAULT_CONFIG = "/etc/nvidia-imex/config.cfg"
DEFAULT_NODES = "/etc/nvidia-imex/nodes_config.cfg"
DEFAULT_LOG = "/var/log/nvidia-imex.log"
PID_FILE = "/var/run/nvidia-imex/nv-imex.pid"
DEFAULT_SERVER_PORT = 50000
PEER_TIMEOUT = 3.0
HEARTBEAT = 1.0

# The keys and defaults of NVIDIA's config.cfg (IMEX guide, "IMEX Service Config Options"); the package installs it.
CONFIG_TEMPLATE = """# NVIDIA IMEX configuration file (simulated NVIDIA stack).
# Note: This configuration file is read during IMEX startup. So, IMEX service restart is required for new
# settings to take effect.
LOG_LEVEL=4
LOG_FILE_NAME=/var/log/nvidia-imex.log
LOG_APPEND_TO_LOG=1
LOG_USE_SYSLOG=0
DAEMONIZE=1
# Network interface to listen for IMEX peer communication; empty: determined from the node configuration file.
BIND_INTERFACE_IP=
# Starting TCP port number for IMEX peer communication.
SERVER_PORT=50000
# Name of file containing IP addresses of nodes.
IMEX_NODE_CONFIG_FILE=/etc/nvidia-imex/nodes_config.cfg
NETWORK_INTERFACE=
IMEX_WAIT_FOR_QUORUM=RECOVERY
IMEX_ENABLE_AUTH_ENCRYPTION=0
# The command service that nvidia-imex-ctl queries.
IMEX_CMD_ENABLED=1
IMEX_CMD_BIND_INTERFACE_IP=
IMEX_CMD_PORT=50005
IMEX_CMD_UNIX_DOMAIN_PATH=
IMEX_NODE_DISCONNECTED_GRACE_TIME=-1
"""


class ImexError(Exception):
    """A start-up failure: the message goes to the log and to stderr."""


def read_config(path: Path) -> dict[str, str]:
    """``KEY=VALUE`` lines of config.cfg (comments and blanks ignored).

    Raises:
        ImexError: the file cannot be read.
    """
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ImexError(f"failed to open IMEX config file {path}: {exc.strerror}") from exc
    values: dict[str, str] = {}
    for line in lines:
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, _, value = line.partition("=")
            values[key.strip()] = value.strip()
    return values


def local_path(path: str) -> Path:
    """A configured path, under ``$NVIDIA_SIM_ROOT`` when that is set (tests)."""
    return _common.sys_path(path) if os.environ.get("NVIDIA_SIM_ROOT") else Path(path)


def read_nodes(path: Path) -> list[str]:
    """The node file: one IP address per line, in order (blank lines ignored; anything else must be an address).

    Raises:
        ImexError: the file cannot be read, is empty, or holds something that is not an IP address.
    """
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ImexError(f"failed to open IMEX node config file {path}: {exc.strerror}") from exc
    nodes: list[str] = []
    for number, line in enumerate(lines, 1):
        entry = line.strip()
        if not entry:
            continue
        try:
            nodes.append(str(ipaddress.ip_address(entry)))
        except ValueError as exc:
            raise ImexError(f"invalid IP address {entry!r} on line {number} of IMEX node config file {path}") from exc
    if not nodes:
        raise ImexError(f"IMEX node config file {path} lists no node")
    return nodes


def port_of(cfg: dict[str, str], key: str, default: int | None) -> int | None:
    """An integer port setting (``default`` when empty).

    Raises:
        ImexError: the value is not a port number.
    """
    value = cfg.get(key, "")
    if not value:
        return default
    if not value.isdigit() or not 0 < int(value) < 65536:
        raise ImexError(f"invalid {key} value {value!r} in the IMEX config file")
    return int(value)


def timestamp() -> str:
    """The ``-N`` timestamp, as NVIDIA prints it (``9/4/2026 00:37:39.905``)."""
    now = time.time()
    t = time.localtime(now)
    return f"{t.tm_mon}/{t.tm_mday}/{t.tm_year} {time.strftime('%H:%M:%S', t)}.{int(now * 1000) % 1000:03d}"


class Peer:
    """What this daemon knows of one other node."""

    def __init__(self, host: str) -> None:
        self.host = host
        self.ever = False
        self.report: dict[str, Any] | None = None  # the peer's last answer while connected


class Daemon:
    """The running daemon: its listener, one connector per peer and the command service."""

    def __init__(self, nodes: list[str], own: str, port: int, version: str, log: Path) -> None:
        self.nodes = nodes
        self.own = own
        self.port = port
        self.version = version
        self.log = log
        self.hostname = socket.gethostname()
        self.peers = {host: Peer(host) for host in nodes if host != own}
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.last_seen: dict[int, str] = {}

    # -------------------------------------------------------------------------------------------- peer links
    def connection_status(self, host: str) -> str:
        if host == self.own:
            return "CONNECTED"
        peer = self.peers[host]
        if peer.report is not None:
            return "CONNECTED"
        return "DISCONNECTED" if peer.ever else "NEVER_CONNECTED"

    def own_report(self) -> dict[str, Any]:
        with self.lock:
            connections = {str(i): {"host": host, "status": self.connection_status(host)}
                           for i, host in enumerate(self.nodes)}
        return {"host": self.own, "hostName": self.hostname, "status": "READY", "version": self.version,
                "connections": connections}

    def serve_peer(self, conn: socket.socket) -> None:
        """Answer each line a connecting peer sends with our own report."""
        conn.settimeout(PEER_TIMEOUT * 2)
        with conn, contextlib.suppress(OSError), conn.makefile("rwb") as stream:
            for line in stream:
                if self.stop.is_set() or not line.strip():
                    break
                stream.write(json.dumps(self.own_report()).encode() + b"\n")
                stream.flush()

    def connect_peer(self, peer: Peer) -> None:
        """Keep a connection to one peer; retry until the daemon stops (peers may come later)."""
        while not self.stop.is_set():
            try:
                with socket.create_connection((peer.host, self.port), timeout=PEER_TIMEOUT) as conn:
                    conn.settimeout(PEER_TIMEOUT)
                    with conn.makefile("rwb") as stream:
                        while not self.stop.is_set():
                            stream.write(json.dumps({"host": self.own}).encode() + b"\n")
                            stream.flush()
                            answer = json.loads(stream.readline() or b"null")
                            if not isinstance(answer, dict) or answer.get("host") != peer.host:
                                raise OSError("not the IMEX daemon of this node")
                            with self.lock:
                                if not peer.ever:
                                    _common.log_line(self.log, f"Connection established to node {peer.host}")
                                peer.ever = True
                                peer.report = answer
                            self.stop.wait(HEARTBEAT)
            except (OSError, ValueError):
                pass
            with self.lock:
                if peer.report is not None:
                    _common.log_line(self.log, f"Connection lost to node {peer.host}")
                peer.report = None
            self.stop.wait(HEARTBEAT)

    # ----------------------------------------------------------------------------------------------- queries
    def domain(self, names: bool) -> dict[str, Any]:
        """The ``nvidia-imex-ctl -N -j`` document (``names``: with ``hostName``, as ``-H`` asks)."""
        nodes: dict[str, Any] = {}
        own = self.own_report()
        with self.lock:
            for i, host in enumerate(self.nodes):
                report = own if host == self.own else self.peers[host].report
                entry: dict[str, Any]
                if report is not None:
                    entry = {"status": str(report.get("status", "UNAVAILABLE")), "host": host,
                             "hostName": str(report.get("hostName", "")),
                             "connections": {k: {"host": v.get("host", ""), "status": v.get("status", "INVALID")}
                                             for k, v in dict(report.get("connections", {})).items()},
                             "version": str(report.get("version", ""))}
                else:
                    entry = {"status": "UNAVAILABLE", "host": host, "hostName": "",
                             "connections": {str(j): {"host": other, "status": "INVALID"}
                                             for j, other in enumerate(self.nodes)},
                             "version": ""}
                entry["changed"] = self.last_seen.get(i) != entry["status"]
                self.last_seen[i] = entry["status"]
                for connection in entry["connections"].values():
                    connection["changed"] = entry["changed"]
                if not names:
                    entry.pop("hostName")
                nodes[str(i)] = {key: entry[key] for key in
                                 ("status", "host", "hostName", "connections", "changed", "version") if key in entry}
        ready = sum(1 for node in nodes.values() if node["status"] == "READY")
        state = "UP" if ready == len(nodes) else "DEGRADED" if ready else "DOWN"
        return {"nodes": nodes, "timestamp": timestamp(), "status": state}

    def serve_command(self, conn: socket.socket) -> None:
        """One ``nvidia-imex-ctl`` request: ``N`` / ``NH`` (domain, with names) or ``q`` (this daemon)."""
        conn.settimeout(5.0)
        with conn, contextlib.suppress(OSError, ValueError):
            request = conn.makefile("rb").readline().decode().strip()
            answer = self.domain(names=request == "NH") if request.startswith("N") else {"status": "READY"}
            conn.sendall(json.dumps(answer).encode() + b"\n")


def listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(64)
    return sock


def accept_loop(sock: socket.socket, handler: Any, stop: threading.Event) -> None:
    sock.settimeout(0.5)
    while not stop.is_set():
        try:
            conn, _ = sock.accept()
        except TimeoutError:
            continue
        except OSError:
            return
        threading.Thread(target=handler, args=(conn,), daemon=True).start()


def bind_peer_listener(cfg: dict[str, str], nodes: list[str], port: int) -> tuple[str, socket.socket]:
    """Bind the peer listener: on BIND_INTERFACE_IP, or the first node address this host can bind.

    Raises:
        ImexError: nothing could be bound, or the bind address is not a node of the domain.
    """
    wanted = cfg.get("BIND_INTERFACE_IP", "")
    candidates = [wanted] if wanted else nodes
    errors = []
    for host in candidates:
        try:
            return host, listen(host, port)
        except OSError as exc:
            errors.append(f"{host}:{port}: {exc.strerror}")
    raise ImexError("IMEX failed to bind the peer listener (" + "; ".join(errors) + ")")


def driver_version() -> str:
    """The loaded driver's version through NVML.

    Raises:
        ImexError: NVML cannot be initialised.
    """
    try:
        nv = _common.load_pynvml()
        _common.nvml_init(nv)
        return _common.text(nv.nvmlSystemGetDriverVersion())
    except _common.ToolError as exc:
        raise ImexError("IMEX failed to initialize NVML: the NVIDIA driver is not loaded") from exc


def start(cfg: dict[str, str], version: str, log: Path) -> tuple[Daemon, list[socket.socket]]:
    """Check the driver, read the domain and bind the listeners.

    Raises:
        ImexError: any start-up failure (driver, node file, ports).
    """
    driver = driver_version()
    if driver != version:
        raise ImexError(f"NvGpu Library version {version} is not matching with current GPU driver version {driver}")
    nodes = read_nodes(local_path(cfg.get("IMEX_NODE_CONFIG_FILE") or DEFAULT_NODES))
    port = port_of(cfg, "SERVER_PORT", DEFAULT_SERVER_PORT) or DEFAULT_SERVER_PORT
    own, peer_sock = bind_peer_listener(cfg, nodes, port)
    if own not in nodes:
        peer_sock.close()
        raise ImexError(f"IMEX bind address {own} is not listed in the IMEX node config file")
    socks = [peer_sock]
    if cfg.get("IMEX_CMD_ENABLED", "0") == "1":
        cmd_port = port_of(cfg, "IMEX_CMD_PORT", None)
        if cmd_port is None:
            peer_sock.close()
            raise ImexError("IMEX_CMD_ENABLED=1 needs IMEX_CMD_PORT in the IMEX config file")
        cmd_host = cfg.get("IMEX_CMD_BIND_INTERFACE_IP", "") or "0.0.0.0"
        try:
            socks.append(listen(cmd_host, cmd_port))
        except OSError as exc:
            peer_sock.close()
            raise ImexError(f"IMEX failed to bind the command service on {cmd_host}:{cmd_port}: "
                            f"{exc.strerror}") from exc
    return Daemon(nodes, own, port, version, log), socks


def run(argv: list[str], version: str) -> int:
    """Start the IMEX daemon; return its exit status."""
    parser = argparse.ArgumentParser(prog=NAME, description="NVIDIA IMEX daemon (simulated)")
    parser.add_argument("-c", "--config", default=DEFAULT_CONFIG)
    parser.add_argument("-v", "--version", action="store_true")
    parser.add_argument("--foreground", action="store_true", help="do not fork (simulator extension)")
    args = parser.parse_args(argv)
    if args.version:
        print(f"IMEX version is: {version}")
        return 0
    log = Path(DEFAULT_LOG)
    notify = None
    try:
        cfg = read_config(local_path(args.config))
        log = local_path(cfg.get("LOG_FILE_NAME") or DEFAULT_LOG)
        if cfg.get("DAEMONIZE", "1") == "1" and not args.foreground:
            notify = _common.detach()
        _common.log_line(log, f"IMEX version {version} is running with the following configuration options")
        daemon, socks = start(cfg, version, log)
    except ImexError as exc:
        _common.log_line(log, str(exc))
        print(str(exc), file=sys.stderr)
        if notify:
            notify(False)
        return 1
    stop = _common.StopFlag()
    pid_file = _common.sys_path(PID_FILE)
    _common.write_pid_file(pid_file)
    threads = [threading.Thread(target=accept_loop, args=(socks[0], daemon.serve_peer, daemon.stop), daemon=True)]
    if len(socks) > 1:
        threads.append(threading.Thread(target=accept_loop, args=(socks[1], daemon.serve_command, daemon.stop),
                                        daemon=True))
    threads += [threading.Thread(target=daemon.connect_peer, args=(peer,), daemon=True)
                for peer in daemon.peers.values()]
    for thread in threads:
        thread.start()
    _common.log_line(log, f"IMEX daemon listening on {daemon.own}:{daemon.port} for {len(daemon.nodes)} nodes")
    if notify:
        notify(True)
    try:
        while not stop.wait(1.0):
            pass
    finally:
        daemon.stop.set()
        for sock in socks:
            sock.close()
        pid_file.unlink(missing_ok=True)
        _common.log_line(log, "IMEX daemon is exiting on signal")
    return 0


def main(argv: list[str] | None = None, version: str | None = None) -> int:
    """Entry point of ``nvidia-imex``."""
    return run(sys.argv[1:] if argv is None else argv, _common.tool_version(version, "0.0.0"))


if __name__ == "__main__":
    sys.exit(main())
