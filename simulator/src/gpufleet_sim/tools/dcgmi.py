"""Simulated ``dcgmi``: ``discovery -l``, ``diag -r 1|2|3 [--json]``, ``health -s LETTERS`` / ``health -c [--json]``.

Every command talks to the host engine (``nv-hostengine``) over TCP, so it fails like DCGM's when none runs.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
from typing import Any

from . import _common
from ._common import ToolError
from .dcgm_checks import TEST_LABELS

CONNECT_FAILED = ("Error: unable to establish a connection to the specified host: {host}\n"
                  "Error: Unable to connect to host engine. Host engine connection invalid/disconnected.")
WIDTH_LEFT, WIDTH_RIGHT = 27, 48


def request(host: str, payload: dict[str, Any]) -> dict[str, Any]:
    """Send one request to the host engine at ``host`` (``addr[:port]``) and return its answer."""
    addr, _, port = host.partition(":")
    try:
        with socket.create_connection((addr if addr != "localhost" else "127.0.0.1", int(port or 5555)),
                                      timeout=30) as sock:
            sock.sendall((json.dumps(payload) + "\n").encode())
            data = b""
            while not data.endswith(b"\n"):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
    except OSError as exc:
        raise ToolError(CONNECT_FAILED.format(host=addr), 1) from exc
    answer: dict[str, Any] = json.loads(data or b"{}")
    if not answer.get("ok"):
        raise ToolError(f"Error: {answer.get('error', 'no answer from the host engine')}", 1)
    return answer


def _row(left: str, right: str) -> str:
    return f"| {left:<{WIDTH_LEFT - 2}} | {right:<{WIDTH_RIGHT - 2}} |"


def _sep(char: str = "-") -> str:
    return f"+{char * WIDTH_LEFT}+{char * WIDTH_RIGHT}+"


def discovery(host: str) -> int:
    """``dcgmi discovery -l``."""
    answer = request(host, {"cmd": "discovery"})
    gpus = answer["gpus"]
    bar = "+--------+----------------------------------------------------------------------+"
    lines = [f"{len(gpus)} GPU{'s' if len(gpus) != 1 else ''} found.", bar,
             "| GPU ID | Device Information                                                   |", bar]
    for gpu in gpus:
        lines += [f"| {gpu['id']:<6} | {'Name: ' + gpu['name']:<68} |",
                  f"|        | {'PCI Bus ID: ' + gpu['bus_id']:<68} |",
                  f"|        | {'Device UUID: ' + gpu['uuid']:<68} |", bar]
    switches = int(answer.get("nvswitches", 0))
    lines += [f"{switches} NvSwitch{'es' if switches != 1 else ''} found.", "+-----------+",
              "| Switch ID |", "+-----------+"]
    lines += [f"| {i:<9} |" for i in range(switches)] + ["+-----------+"]
    print("\n".join(lines))
    return 0


def diag_json(answer: dict[str, Any]) -> dict[str, Any]:
    """``dcgmi diag -j`` as DCGM 4.x prints it (NVIDIA/DCGM testing/python3/tests/test_dcgm_diag.py reads these keys):
    ``DCGM Diagnostic.test_categories[].tests[]`` with the plugin's ``name``, per-entity ``results`` (``entity_group``,
    ``entity_group_id``, ``entity_id``, ``status``, ``warnings[]`` with ``warning``, ``error_id``, ``error_category``,
    ``error_severity``) and a ``test_summary``; then ``entity_groups`` and ``metadata``."""
    categories: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for r in answer["results"]:
        tests = categories.setdefault(r["category"], {})
        warnings = [{"warning": e, **code} for e, code in zip(r["errors"], r.get("codes") or [], strict=False)]
        tests.setdefault(r["name"], []).append(
            {"entity_group": "GPU", "entity_group_id": 1, "entity_id": r["gpu"], "status": r["status"],
             **({"warnings": warnings} if warnings else {})})

    def summary(results: list[dict[str, Any]]) -> dict[str, str]:
        statuses = {res["status"] for res in results}
        return {"status": "Fail" if "Fail" in statuses else "Pass" if "Pass" in statuses else "Skip"}

    gpus = sorted({r["gpu"] for r in answer["results"]})
    return {
        "DCGM Diagnostic": {"test_categories": [
            {"category": cat, "tests": [{"name": name, "results": res, "test_summary": summary(res)}
                                        for name, res in tests.items()]}
            for cat, tests in categories.items()]},
        "entity_groups": [{"entity_group": "GPU", "entity_group_id": 1,
                           "entities": [{"entity_id": g, "device_id": d}
                                        for g, d in zip(gpus, answer["device_ids"], strict=False)]}],
        "metadata": {"version": answer.get("version", ""), "DCGM Version": answer.get("version", ""),
                     "Driver Version Detected": answer["driver"], "GPU Device IDs": answer["device_ids"]},
    }


def diag(host: str, level: int, as_json: bool) -> int:
    """``dcgmi diag -r LEVEL``: table or ``--json``; exit 1 when a test fails."""
    answer = request(host, {"cmd": "diag", "level": level})
    results = answer["results"]
    failed = any(r["status"] == "Fail" for r in results)
    if as_json:
        print(json.dumps(diag_json(answer), indent=4))
        return 1 if failed else 0
    lines = ["Successfully ran diagnostic for group.", _sep(), _row("Diagnostic", "Result"), _sep("="),
             f"|-----  Metadata  ----------+{'-' * WIDTH_RIGHT}|",
             _row("Driver Version Detected", answer["driver"]),
             _row("GPU Device IDs Detected", ",".join(answer["device_ids"]))]
    seen: list[tuple[str, str]] = []
    for r in results:
        if (r["category"], r["name"]) not in seen:
            seen.append((r["category"], r["name"]))
    category = ""
    for cat, name in seen:
        if cat != category:
            category = cat
            lines.append(f"|-----  {cat}  {'-' * (WIDTH_LEFT - len(cat) - 9)}+{'-' * WIDTH_RIGHT}|")
        rows = [r for r in results if (r["category"], r["name"]) == (cat, name)]
        verdict = "Fail" if any(r["status"] == "Fail" for r in rows) else "Pass"
        lines.append(_row(TEST_LABELS[name], verdict))
        for r in rows:
            lines.append(_row(f"  GPU{r['gpu']}", r["status"]))
            for error in r["errors"]:
                lines.extend(_row("  Error", chunk) if i == 0 else _row("", chunk)
                             for i, chunk in enumerate(_wrap(error, WIDTH_RIGHT - 2)))
    lines.append(_sep())
    print("\n".join(lines))
    return 1 if failed else 0


def _wrap(text: str, width: int) -> list[str]:
    words, lines, current = text.split(), [], ""
    for word in words:
        if current and len(current) + 1 + len(word) > width:
            lines.append(current)
            current = word
        else:
            current = f"{current} {word}".strip()
    return [*lines, current] if current else lines


def health(host: str, systems: str | None, check: bool, as_json: bool) -> int:
    """``dcgmi health -s LETTERS`` or ``-c``."""
    if systems is not None:
        request(host, {"cmd": "health_set", "systems": systems})
        print("Health monitor systems set successfully.")
        return 0
    if not check:
        raise ToolError("Error: one of -s or -c is required.", 1)
    answer = request(host, {"cmd": "health_check"})
    incidents = answer["incidents"]
    if as_json:
        print(json.dumps({"overall_health": answer["overall"], "watched_systems": answer["watches"],
                          "incidents": incidents}, indent=4))
        return 0
    lines = [_sep(), f"| {'Health Monitor Report':<{WIDTH_LEFT + WIDTH_RIGHT - 1}} |", _sep("="),
             _row("Overall Health", answer["overall"])]
    for gpu in sorted({i["gpu"] for i in incidents}):
        mine = [i for i in incidents if i["gpu"] == gpu]
        worst = "Failure" if any(i["health"] == "Failure" for i in mine) else "Warning"
        lines += [_row("GPU", ""), _row(f"-> {gpu}", worst), _row("   -> Errors", "")]
        for incident in mine:
            lines.append(_row(f"      -> {incident['system']} system", incident["health"]))
            lines.extend(_row("", chunk) for chunk in _wrap(incident["message"], WIDTH_RIGHT - 2))
    lines.append(_sep())
    print("\n".join(lines))
    return 0


def run(argv: list[str]) -> int:
    """Run ``dcgmi``; return the exit status."""
    p = argparse.ArgumentParser(prog="dcgmi", description="DCGM command-line interface (simulated)")
    sub = p.add_subparsers(dest="command", required=True)
    disc = sub.add_parser("discovery")
    disc.add_argument("-l", "--list", action="store_true")
    disc.add_argument("--host", default="localhost")
    dg = sub.add_parser("diag")
    dg.add_argument("-r", "--run", type=int, required=True)
    dg.add_argument("-j", "--json", action="store_true")
    dg.add_argument("-g", "--group")
    dg.add_argument("--host", default="localhost")
    hl = sub.add_parser("health")
    hl.add_argument("-s", "--set")
    hl.add_argument("-c", "--check", action="store_true")
    hl.add_argument("-j", "--json", action="store_true")
    hl.add_argument("-g", "--group")
    hl.add_argument("--host", default="localhost")
    args = p.parse_args(argv)
    if args.command == "discovery":
        return discovery(args.host)
    if args.command == "diag":
        return diag(args.host, args.run, args.json)
    return health(args.host, args.set, args.check, args.json)


def main(argv: list[str] | None = None, version: str | None = None) -> int:
    """Entry point of ``dcgmi``."""
    return _common.run_main(run, argv)


if __name__ == "__main__":
    sys.exit(main())
