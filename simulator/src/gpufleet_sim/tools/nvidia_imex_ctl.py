"""Simulated ``nvidia-imex-ctl``: asks the local IMEX daemon's command service for its state.

The options are NVIDIA's (IMEX guide, "IMEX Service Command Service",
https://docs.nvidia.com/multi-node-nvlink-systems/imex-guide/cmdservice.html): ``-c <config.cfg>`` (default
``/etc/nvidia-imex/config.cfg``) or ``-i <IP> <PORT>`` names the service, ``-N`` the status of the whole domain,
``-q`` the local daemon's state (``READY``), ``-H`` host names and ``-j`` JSON. The ``-N -j`` document has the shape
NVIDIA's prints: ``{"nodes": {"0": {"status": "READY", "host": ..., "connections": {"0": {"host": ...,
"status": "CONNECTED", ...}}, "changed": ..., "version": ...}}, "timestamp": ..., "status": "UP"}``, a node whose
daemon does not answer is ``UNAVAILABLE`` and the domain ``UP``, ``DEGRADED`` or ``DOWN``.
When the service cannot be reached it prints why on stderr and exits 255, as NVIDIA's does.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
from typing import Any

from . import _common
from .nvidia_imex import DEFAULT_CONFIG, ImexError, local_path, port_of, read_config

NAME = "nvidia-imex-ctl"
EXIT_FAILED = 255
CONNECTION_LETTER = {"CONNECTED": "C", "NEVER_CONNECTED": "N", "DISCONNECTED": "D", "INVALID": "I"}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=NAME, description="NVIDIA IMEX control utility (simulated)")
    p.add_argument("-c", dest="config", default=None)
    p.add_argument("-i", dest="address", nargs=2, metavar=("IP", "PORT"))
    p.add_argument("-N", dest="domain", action="store_true")
    p.add_argument("-q", dest="query", action="store_true")
    p.add_argument("-H", dest="names", action="store_true")
    p.add_argument("-j", dest="json", action="store_true")
    p.add_argument("-t", dest="timeout", type=int, default=5000, help="timeout in milliseconds")
    return p


def service_address(args: argparse.Namespace) -> tuple[str, int]:
    """Where the command service listens: ``-i`` or the config file's ``IMEX_CMD_*`` keys.

    Raises:
        ImexError: the config file cannot be read or does not enable the command service.
    """
    if args.address:
        return args.address[0], int(args.address[1])
    path = args.config or DEFAULT_CONFIG
    cfg = read_config(local_path(path))
    port = port_of(cfg, "IMEX_CMD_PORT", None)
    if cfg.get("IMEX_CMD_ENABLED", "0") != "1" or port is None:
        raise ImexError(f"the IMEX command service is not enabled in {path} (IMEX_CMD_ENABLED=1 and IMEX_CMD_PORT)")
    return cfg.get("IMEX_CMD_BIND_INTERFACE_IP", "") or "127.0.0.1", port


def ask(host: str, port: int, request: str, timeout: float) -> dict[str, Any]:
    """Send one request to the command service and return its JSON answer.

    Raises:
        ImexError: the service does not answer.
    """
    try:
        with socket.create_connection((host, port), timeout=timeout) as conn:
            conn.settimeout(timeout)
            conn.sendall(request.encode() + b"\n")
            data = conn.makefile("rb").readline()
        answer = json.loads(data)
    except (OSError, ValueError) as exc:
        raise ImexError(f"Connection to IMEX command service at {host}:{port} failed: "
                        f"{getattr(exc, 'strerror', None) or exc}") from exc
    if not isinstance(answer, dict):
        raise ImexError(f"IMEX command service at {host}:{port} sent no status")
    return answer


def format_domain(doc: dict[str, Any], names: bool) -> str:
    """The formatted ``-N`` view: one line per node, the connection matrix, the domain state."""
    nodes = doc.get("nodes", {})
    lines = []
    for index, node in nodes.items():
        label = f"{node['host']} ({node['hostName']})" if names and node.get("hostName") else node["host"]
        lines.append(f"Node #{index:<3} - {label:<30} - {node['status']:<20} - Version: {node['version']}")
    lines.append("")
    lines.append(" Nodes From\\To  " + "  ".join(f"{i:<2}" for i in nodes))
    for index, node in nodes.items():
        row = [CONNECTION_LETTER.get(c.get("status", ""), "I") for c in node.get("connections", {}).values()]
        lines.append(f"       {index:<8} " + "   ".join(row))
    lines.append(f"Domain State: {doc.get('status', 'DOWN')}")
    return "\n".join(lines)


def run(argv: list[str]) -> int:
    """Run one query; return the exit status."""
    args = _parser().parse_args(argv)
    if not args.domain and not args.query:
        print(f"{NAME}: one of -N or -q is required", file=sys.stderr)
        return _common.EXIT_INVALID_ARGUMENT
    try:
        host, port = service_address(args)
        if args.domain:
            doc = ask(host, port, "NH" if args.names else "N", args.timeout / 1000)
            print(json.dumps(doc, indent=2) if args.json else format_domain(doc, args.names))
        else:
            print(ask(host, port, "q", args.timeout / 1000).get("status", "UNAVAILABLE"))
    except ImexError as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_FAILED
    return 0


def main(argv: list[str] | None = None, version: str | None = None) -> int:
    """Entry point of ``nvidia-imex-ctl``."""
    del version
    return run(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
