"""The fleet report: every host's GPUs, their verdicts and their MIG slices, from one ``gpufleet verify`` result.

:func:`fleet_from_result` turns the document ``gpufleet verify --json`` prints (:meth:`RunResult.to_dict`) into a
plain model that the HTML page (:mod:`gpufleet.renderers.fleet_html`) and the terminal view
(:mod:`gpufleet.renderers.fleet_text`) draw. Fail closed: a host without a health report (unreachable, or its health
task failed before the check) is UNKNOWN with the reason, never PASS; so is a GPU whose level is missing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpufleet import __version__
from gpufleet.errors import InputError
from gpufleet.health_verdict import LEVELS, host_report, report_level

#: A level the report draws for something it could not judge.
UNKNOWN = "UNKNOWN"


def _level(value: Any) -> str:
    return str(value) if value in LEVELS else UNKNOWN


def _mig(gpu: Mapping[str, Any]) -> dict[str, Any] | None:
    """The GPU's MIG drawing: ``{slots, instances: [{gi_id, profile, start, size, compute: [{name, uuid}]}]}``."""
    mig = gpu.get("mig")
    if not isinstance(mig, Mapping) or not mig.get("enabled"):
        return None
    instances = []
    for gi in mig.get("gpu_instances") or []:
        instances.append(
            {
                "gi_id": gi.get("id"),
                "profile": gi.get("profile_name"),
                "start": int(gi.get("start", 0)),
                "size": int(gi.get("size", 0)),
                "compute": [
                    {"name": ci.get("name"), "uuid": ci.get("uuid")} for ci in gi.get("compute_instances") or []
                ],
            }
        )
    ends = [i["start"] + i["size"] for i in instances]
    slots = mig.get("slots")
    # An older module has no slots: the instances' extent is the best drawing there is (gaps at the end unseen).
    return {
        "slots": int(slots) if isinstance(slots, int) and slots > 0 else max(ends, default=0),
        "slots_known": isinstance(slots, int) and slots > 0,
        "instances": sorted(instances, key=lambda i: (i["start"], i["gi_id"] or 0)),
    }


def _problems(report: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every check that is not PASS: where, level, action, message, value and threshold."""
    out = []
    for check in report.get("checks") or []:
        level = (
            _level(check.get("level"))
            if check.get("level")
            else ("PASS" if check.get("status") == "ok" else "WARNING" if check.get("status") == "warn" else "CRITICAL")
        )
        if level == "PASS":
            continue
        gpu = check.get("gpu") or None
        out.append(
            {
                "check": check.get("name"),
                "gpu": gpu.get("index") if gpu else None,
                "port": _port_of(check),
                "uuid": gpu.get("uuid") if gpu else None,
                "level": level,
                "action": check.get("action") or "none",
                "message": check.get("message"),
                "value": check.get("value"),
                "threshold": check.get("threshold"),
            }
        )
    out.sort(key=lambda p: (-LEVELS.index(p["level"]), p["gpu"] if p["gpu"] is not None else -1, str(p["check"])))
    return out


def _port_of(check: Mapping[str, Any]) -> str | None:
    """``"mlx5_2 port 1"`` for a check whose evidence names an HCA port (the RDMA port checks), else None."""
    evidence = check.get("evidence")
    if isinstance(evidence, Mapping) and evidence.get("hca") is not None:
        return f"{evidence['hca']} port {evidence.get('port')}"
    return None


def _network(report: Mapping[str, Any]) -> dict[str, Any] | None:
    """The host's RDMA side as the report judged it (``network``), or None where no RDMA check ran.

    Its level is the report's for every RDMA check (ports, ``nvidia_peermem``, no HCA, a GPU far from its NIC), so
    a network that is fine apart from a missing module is not drawn green.
    """
    network = report.get("network")
    if not isinstance(network, Mapping):
        return None
    ports = [
        {
            "name": f"{port.get('hca')} port {port.get('port')}",
            "hca": port.get("hca"),
            "port": port.get("port"),
            "state": port.get("state"),
            "phys_state": port.get("phys_state"),
            "rate": port.get("rate"),
            "link_layer": port.get("link_layer"),
            "level": _level(port.get("level")),
        }
        for port in network.get("ports") or []
        if isinstance(port, Mapping)
    ]
    peermem = network.get("nvidia_peermem_loaded")
    return {
        "expected": bool(network.get("expected")),
        "peermem": "loaded" if peermem is True else "not loaded" if peermem is False else "unknown",
        "ports": ports,
        "level": _level(network.get("level")),
    }


def _no_report_reason(host: Mapping[str, Any]) -> str:
    if host.get("unreachable"):
        why = "; ".join(str(t.get("msg")) for t in host.get("failed_tasks") or [] if t.get("msg"))
        return f"unreachable: {why or 'no connection'}; check the host and rerun gpufleet verify"
    failed = [t for t in host.get("failed_tasks") or [] if t.get("msg")]
    if failed:
        return (
            f"no health report: task {failed[0].get('task')!r} failed: {failed[0].get('msg')}; fix it and rerun "
            "gpufleet verify"
        )
    return "no health report: the gpu_health role did not run on this host; rerun gpufleet verify without --limit"


def _host(name: str, host: Mapping[str, Any]) -> dict[str, Any]:
    report = host_report((host.get("module_data") or {}).get("health"))
    if report is None:
        return {
            "name": name,
            "status": host.get("status"),
            "level": UNKNOWN,
            "action": "none",
            "error": _no_report_reason(host),
            "gpus": [],
            "problems": [],
            "driver_version": None,
            "gpu_count": None,
            "network": None,
        }
    per_gpu: dict[int, list[dict[str, Any]]] = {}
    problems = _problems(report)
    for problem in problems:
        if problem["gpu"] is not None:
            per_gpu.setdefault(int(problem["gpu"]), []).append(problem)
    gpus = []
    for gpu in report.get("gpus") or []:
        gpus.append(
            {
                "index": gpu.get("index"),
                "uuid": gpu.get("uuid"),
                "pci_bus_id": gpu.get("pci_bus_id"),
                "name": gpu.get("name"),
                "level": _level(gpu.get("level")),
                "action": gpu.get("action") or "none",
                "problems": per_gpu.get(int(gpu.get("index", -1)), []),
                "mig": _mig(gpu),
            }
        )
    return {
        "name": name,
        "status": host.get("status"),
        "level": report_level(report),
        "action": report.get("action") or "none",
        "error": None,
        "gpus": gpus,
        "problems": problems,
        "driver_version": report.get("driver_version"),
        "gpu_count": report.get("gpu_count"),
        "virtualization": _virtualization(report),
        "network": _network(report),
        "xid_catalogue": report.get("xid_catalogue"),
    }


def _virtualization(report: Mapping[str, Any]) -> str | None:
    """The GPUs' virtualization modes other than bare metal ("Pass-Through": the host is a VM), or None."""
    modes = sorted({str(g["virtualization_mode"]) for g in report.get("gpus") or []
                    if g.get("virtualization_mode") not in (None, "None")})
    return ", ".join(modes) or None


def fleet_from_result(doc: Mapping[str, Any], generated_at: str | None = None) -> dict[str, Any]:
    """The fleet model of a ``gpufleet verify --json`` document (see the module docstring)."""
    if not isinstance(doc, Mapping) or not isinstance(doc.get("hosts"), Mapping):
        raise InputError("not a gpufleet verify result: no 'hosts' mapping; write one with gpufleet verify --json")
    hosts = [_host(str(name), host) for name, host in sorted(doc["hosts"].items())]
    levels = [h["level"] for h in hosts]
    counts = {level: sum(1 for h in hosts for g in h["gpus"] if g["level"] == level) for level in LEVELS}
    meta = {
        key: doc.get(key)
        for key in ("playbook", "inventory", "limit", "status", "exit_code", "started_at", "ended_at", "error")
    }
    meta["generated_at"] = generated_at or datetime.now(UTC).isoformat(timespec="seconds")
    meta["gpufleet_version"] = __version__
    return {
        "level": max(levels, key=LEVELS.index) if levels else UNKNOWN,
        "hosts": hosts,
        "gpu_levels": counts,
        "meta": meta,
    }


def load_result(path: str) -> dict[str, Any]:
    """Read a saved ``gpufleet verify --json`` document (``-`` reads stdin)."""
    import sys

    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror}; pass the file gpufleet verify --json wrote") from exc
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise InputError(f"{path} is not JSON ({exc}); pass the file gpufleet verify --json wrote") from exc
    if not isinstance(doc, dict):
        raise InputError(f"{path} is not a gpufleet verify result; pass the file gpufleet verify --json wrote")
    if "playbook" in doc and not str(doc.get("playbook") or "").endswith("verify.yml"):
        raise InputError(
            f"{path} is the result of {doc.get('playbook')}, not of verify.yml; run gpufleet verify --json"
        )
    return doc


def write_html(doc: Mapping[str, Any], path: str) -> dict[str, Any]:
    """Write the HTML fleet report of a verify result to ``path`` (``-``: stdout); return the fleet model."""
    import sys

    from gpufleet.renderers.fleet_html import render_html

    fleet = fleet_from_result(doc)
    page = render_html(fleet)
    if path == "-":
        sys.stdout.write(page)
        return fleet
    try:
        Path(path).write_text(page, encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot write the HTML report to {path}: {exc.strerror}; pick a writable path") from exc
    return fleet
