"""``gpusim``: build the simulated NVIDIA stack and its apt repository, create hosts' state, inject faults.

Sim-only verbs live here, never in the simulated NVIDIA tools. Output uses ``rich`` only when stdout is a terminal.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from . import hardware, infiniband, store

FAULT_ARGS: dict[str, list[tuple[list[str], dict[str, Any]]]] = {
    "xid": [(["code"], {"type": int, "help": "XID number, e.g. 79"})],
    "ecc-uncorrectable": [(["count"], {"type": int, "nargs": "?", "default": 1})],
    "remap-pending": [],
    "remap-failure": [],
    "pcie-downgrade": [(["--gen"], {"type": int}), (["--width"], {"type": int})],
    "nvlink-down": [(["link"], {"type": int})],
    "nvlink-slow": [(["link"], {"type": int}), (["--mbps"], {"type": int, "help": "default: half the nominal"})],
    "thermal-slowdown": [],
    "fallen-off-bus": [],
    "nvml-error": [(["function"], {}), (["code"], {"type": int})],
    "process": [(["pid"], {"type": int}), (["--gi"], {"type": int, "dest": "gi_id"}),
                (["--ci"], {"type": int, "dest": "ci_id"}), (["--name"], {"default": "python3"}),
                (["--used-mib"], {"type": int, "default": 512, "dest": "used_memory_mib"})],
    "fabric-stuck": [],
}
#: RDMA faults (infiniband.py): keyed by HCA and port, not by GPU; the host's kernel files follow the state
_PORT = (["--port"], {"type": int, "default": 1})
RDMA_FAULT_ARGS: dict[str, list[tuple[list[str], dict[str, Any]]]] = {
    "ib-port-down": [(["hca"], {"help": "e.g. mlx5_0"}), _PORT],
    "ib-rate-degraded": [(["hca"], {}), _PORT, (["--width"], {"type": int, "help": "lanes (default 1)"}),
                         (["--speed"], {"help": "SDR ... NDR (default: unchanged)"})],
    "ib-counter": [(["hca"], {}), (["counter"], {"help": "e.g. symbol_error"}), _PORT,
                   (["--add"], {"type": int, "default": 1}),
                   (["--per-second"], {"type": int, "default": 0, "dest": "per_second",
                                       "help": "keep rising while `gpusim rdma-tick` runs"})],
    "peermem-unloaded": [],
    "nic-wrong-socket": [(["hca"], {"help": "the HCA moved to a slot of the other CPU socket"})],
    "ib-link-layer": [(["hca"], {}), _PORT, (["--link-layer"], {"dest": "link_layer", "default": "Ethernet",
                                                                 "choices": ["InfiniBand", "Ethernet"]})],
    "acs-enabled": [(["hca"], {"help": "ACS redirect on the ports of the PCIe switch the HCA shares with its GPU"})],
}


class CliError(Exception):
    """A user-facing error: printed as ``gpusim: <message>``, exit 1."""


def _state_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--state", type=Path, help="state file (default: $NVML_SIM_STATE or /var/lib/nvidia-sim/...)")


def _gpu_arg(p: argparse.ArgumentParser, required: bool = False) -> None:
    p.add_argument("-i", "--gpu", required=required, help="GPU index, UUID or PCI bus id ('all' for every GPU)")


def parser() -> argparse.ArgumentParser:
    """The ``gpusim`` argument parser."""
    p = argparse.ArgumentParser(prog="gpusim", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build the libraries, tools, packages and the signed repository")
    b.add_argument("--out", type=Path, default=Path("build"))
    r = sub.add_parser("repo", help="serve or stop the repository on 127.0.0.1")
    r.add_argument("action", choices=["serve", "stop"])
    r.add_argument("--out", type=Path, default=Path("build"), help="build folder (holds repo/ and the PID file)")
    r.add_argument("--host", default="127.0.0.1")
    r.add_argument("--port", type=int, default=8765)
    h = sub.add_parser("host", help="create a host's state from a fleet preset (init) or a real host's report (import)")
    h.add_argument("action", choices=["init", "import"])
    h.add_argument("--preset", help="init: the fleet preset")
    h.add_argument("--seed", help="init: host seed (e.g. the inventory hostname): UUIDs, serials, buses")
    h.add_argument("--nvidia-smi-xml", type=Path, help="import: a real host's `nvidia-smi -q -x` output")
    h.add_argument("--nvidia-smi-q", type=Path, help="import: a real host's `nvidia-smi -q` output (text), instead")
    h.add_argument("--getters", type=Path, help="import: the same host's NVML getter dump (nvml_getters_dump.py)")
    h.add_argument("--force", action="store_true", help="replace an existing state")
    _state_arg(h)
    sub.add_parser("presets", help="list the fleet presets")
    s = sub.add_parser("show", help="show GPUs, MIG, clients and faults")
    s.add_argument("--json", action="store_true")
    _state_arg(s)
    f = sub.add_parser("fault", help="inject or clear faults")
    fsub = f.add_subparsers(dest="action", required=True)
    inject = fsub.add_parser("inject").add_subparsers(dest="fault", required=True)
    for fault, options in FAULT_ARGS.items():
        fp = inject.add_parser(fault)
        for names, kwargs in options:
            fp.add_argument(*names, **kwargs)
        _gpu_arg(fp, required=fault != "nvml-error")
        _state_arg(fp)
    for fault, options in RDMA_FAULT_ARGS.items():
        fp = inject.add_parser(fault)
        for names, kwargs in options:
            fp.add_argument(*names, **kwargs)
        _state_arg(fp)
    clear = fsub.add_parser("clear")
    clear.add_argument("fault", nargs="?", choices=(*hardware.FAULTS, *infiniband.FAULTS))
    _gpu_arg(clear)
    _state_arg(clear)
    rs = sub.add_parser("reset", help="reset GPUs as nvidia-smi -r would (same refusals)")
    _gpu_arg(rs)
    _state_arg(rs)
    pr = sub.add_parser("process", help="start or end a simulated compute process")
    pr.add_argument("action", choices=["add", "remove"])
    pr.add_argument("--pid", type=int, required=True)
    pr.add_argument("--name", default="python3")
    pr.add_argument("--used-mib", type=int, default=512)
    pr.add_argument("--gi", type=int)
    pr.add_argument("--ci", type=int)
    _gpu_arg(pr, required=True)
    _state_arg(pr)
    mc = sub.add_parser("mps-client", help="connect or disconnect a simulated MPS client")
    mc.add_argument("action", choices=["connect", "disconnect"])
    mc.add_argument("--pid", type=int, default=os.getppid())
    mc.add_argument("--uid", type=int, default=os.getuid())
    fi = sub.add_parser("fidelity", help="compare a real NVML getter dump with the simulator, call by call")
    fi.add_argument("--getters", type=Path, required=True, help="a real nvml_getters_dump.py output (.jsonl)")
    fi.add_argument("--preset", required=True, help="the preset of the simulated host to compare with")
    fi.add_argument("--without-nvlink", action="store_true", help="leave out NVLink and topology calls")
    fi.add_argument("--allow", type=Path, help="allow-list of remaining disagreements: exit 1 on a new or stale one")
    fi.add_argument("--lib", type=Path, help="a built libnvidia-ml.so.1 (default: build one for the dump's driver)")
    fi.add_argument("--out", type=Path, default=Path("build"), help="build folder for that library")
    return p


def _ident(gpu: str | None) -> str | None:
    return None if gpu in (None, "all") else gpu


def cmd_build(out: Path) -> int:
    """``gpusim build``."""
    from . import packaging, repo

    started = time.monotonic()
    debs = packaging.build_all(out)
    wheel = packaging.fetch_wheel(out / "sim" / "wheels")
    repo.build_repo(out / "repo", out / "gnupg", wheel)
    elapsed = time.monotonic() - started
    for deb in debs:
        print(f"  {deb.name}")
    print(f"built {len(debs)} packages and the signed repository {out / 'repo'} in {elapsed:.1f}s")
    return 0


def cmd_repo(action: str, out: Path, host: str, port: int) -> int:
    """``gpusim repo serve|stop``."""
    from . import repo

    if action == "serve":
        pid = repo.serve(out / "repo", host, port, build_dir=out)
        print(f"serving {out / 'repo'} on http://{host}:{port}/ (pid {pid}, {out / repo.PID_FILE})")
    else:
        print("stopped" if repo.stop(out) else "no repository server was running")
    return 0


def cmd_host_init(preset: str, seed: str, state: Path | None, force: bool) -> int:
    """``gpusim host init``."""
    from . import presets

    target = state or store.state_path()
    if target.exists() and not force:
        raise CliError(f"{target} already exists; pass --force to replace it")
    if preset not in presets.list_presets():
        raise CliError(f"unknown preset {preset!r}; known: {', '.join(presets.list_presets())}")
    doc = presets.build_state(preset, seed)
    store.create(target, doc)
    print(f"{target}: {len(doc['gpus'])} GPUs ({preset}, seed {seed})")
    return 0


def cmd_host_import(report: Path, getters: Path | None, state: Path | None, force: bool, text: bool = False) -> int:
    """``gpusim host import``: a host's state from a real host's ``nvidia-smi -q -x`` (``replay.py``) or, with
    ``text``, its ``nvidia-smi -q`` (``replay_text.py``)."""
    from . import replay, replay_text

    target = state or store.state_path()
    if target.exists() and not force:
        raise CliError(f"{target} already exists; pass --force to replace it")
    read = replay_text.state_from_text if text else replay.state_from_xml
    try:
        content = report.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CliError(f"{report}: cannot be read ({exc}); pass the file nvidia-smi wrote") from None
    try:
        doc = read(content, replay.read_getters(getters) if getters else None, source=str(report))
    except replay.ReplayError as exc:
        raise CliError(f"{report}: {exc}") from None
    store.create(target, doc)
    models = ", ".join(doc["replay"]["models"])
    print(f"{target}: {len(doc['gpus'])} GPUs ({models}) from {report}"
          f"{' and ' + str(getters) if getters else ''}; not replayed: {', '.join(doc['replay']['not_replayed'])}")
    return 0


def _host(args: argparse.Namespace) -> int:
    """``gpusim host init|import``: each action's own required options, named as argparse names them."""
    needed = {"init": ("preset", "seed"), "import": ()}[args.action]
    missing = [f"--{name.replace('_', '-')}" for name in needed if getattr(args, name) is None]
    if missing:
        raise CliError(f"host {args.action}: the following arguments are required: {', '.join(missing)}")
    if args.action == "import":
        if (args.nvidia_smi_xml is None) == (args.nvidia_smi_q is None):
            raise CliError("host import: pass one report, --nvidia-smi-xml (`nvidia-smi -q -x`) or --nvidia-smi-q "
                           "(`nvidia-smi -q`)")
        text = args.nvidia_smi_q is not None
        return cmd_host_import(args.nvidia_smi_q if text else args.nvidia_smi_xml, args.getters, args.state,
                               args.force, text=text)
    return cmd_host_init(args.preset, args.seed, args.state, args.force)


def _rows(doc: dict[str, Any]) -> list[list[str]]:
    faults = hardware.active_faults(doc)
    rows = []
    for gpu in doc.get("gpus", []):
        mig = gpu.get("mig", {})
        mig_text = "n/a" if not mig.get("supported") else f"{mig.get('current', 0)}/{mig.get('pending', 0)}"
        gis = ",".join(str(gi["id"]) for gi in mig.get("gpu_instances", [])) or "-"
        procs = ",".join(str(p["pid"]) for p in gpu.get("processes", [])) or "-"
        rows.append([str(gpu["index"]), gpu.get("model", "?"), gpu["pci"]["bus_id"], gpu.get("uuid", "?"),
                     mig_text, gis, "on" if gpu.get("persistence_mode") else "off", procs,
                     ",".join(faults.get(str(gpu["index"]), [])) or "-"])
    return rows


def cmd_show(state: Path | None, as_json: bool) -> int:
    """``gpusim show``."""
    doc = store.load(state)
    if as_json:
        print(json.dumps(doc, indent=2))
        return 0
    header = ["GPU", "Model", "Bus id", "UUID", "MIG cur/pend", "GIs", "Persist", "Processes", "Faults"]
    rows = _rows(doc)
    clients = ", ".join(f"{c['name']}({c['pid']})" for c in hardware.live_clients(doc)) or "none"
    extra = [f"clients: {clients}", f"nvswitch: {doc.get('nvswitch', {}).get('count', 0)}",
             f"system faults: {', '.join(doc.get('faults', {})) or 'none'}", f"event_seq: {doc.get('event_seq', 0)}"]
    if sys.stdout.isatty():
        from rich.console import Console
        from rich.table import Table

        table = Table(*header, title=str(state or store.state_path()))
        for row in rows:
            table.add_row(*row)
        console = Console()
        console.print(table)
        console.print("\n".join(extra))
        return 0
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    for line in [header, *rows]:
        print("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(line)).rstrip())
    print("\n".join(extra))
    return 0


def cmd_fault(args: argparse.Namespace) -> int:
    """``gpusim fault inject|clear``."""
    rdma: list[str] = []
    if args.fault in infiniband.FAULTS or (args.action == "clear" and args.fault is None and args.gpu is None):
        if args.action == "inject":
            values = {k: v for k, v in vars(args).items() if k not in ("command", "action", "fault", "state")}
            print(f"injected: {infiniband.inject(args.fault, values, args.state)}")
            return 0
        rdma = [f"cleared {c}" for c in infiniband.clear(args.fault, args.state)]
        if args.fault is not None:
            print("\n".join(rdma) or "nothing to clear")
            return 0
    if args.action == "clear":
        cleared = hardware.clear(args.fault, _ident(args.gpu), args.state)
        print("\n".join(rdma + [f"cleared {c}" for c in cleared]) or "nothing to clear")
        return 0
    values = {k: v for k, v in vars(args).items() if k not in ("command", "action", "fault", "gpu", "state")}
    for line in hardware.inject(args.fault, _ident(args.gpu), values, args.state):
        print(f"injected: {line}")
    return 0


def cmd_reset(gpu: str | None, state: Path | None) -> int:
    """``gpusim reset``: the hardware reset, with nvidia-smi's refusal wording."""
    try:
        done = hardware.reset(_ident(gpu), state)
    except hardware.ResetRefusedAll as exc:
        lines = [f"  GPU {r.bus_id}: {r.reason}" for r in exc.refusals]
        raise CliError("The following GPUs could not be reset:\n" + "\n".join(lines)) from exc
    for bus in done:
        print(f"GPU {bus} was successfully reset.")
    return 0


def cmd_mps_client(action: str, pid: int, uid: int) -> int:
    """``gpusim mps-client``: talk to the simulated MPS control daemon's pipe."""
    from .tools import _common, nvidia_cuda_mps_control

    command = f"sim_client_connect {pid} {uid}" if action == "connect" else f"sim_client_disconnect {pid}"
    try:
        answer = nvidia_cuda_mps_control.send(command)
    except _common.ToolError as exc:
        raise CliError(exc.message) from exc
    print(f"client {pid} connected to MPS server {answer}" if action == "connect" else f"client {pid} disconnected")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``gpusim``."""
    arguments = parser()
    from importlib.metadata import PackageNotFoundError, version

    try:
        dist_version = version("gpufleet-sim")
    except PackageNotFoundError:  # a checkout used without installing it
        dist_version = "0.0.0+checkout"
    arguments.add_argument("--version", action="version", version=f"%(prog)s {dist_version}")
    args = arguments.parse_args(argv)
    try:
        if args.command == "build":
            return cmd_build(args.out)
        if args.command == "repo":
            return cmd_repo(args.action, args.out, args.host, args.port)
        if args.command == "host":
            return _host(args)
        if args.command == "presets":
            from . import presets

            print("\n".join(presets.list_presets()))
            return 0
        if args.command == "show":
            return cmd_show(args.state, args.json)
        if args.command == "fault":
            return cmd_fault(args)
        if args.command == "reset":
            return cmd_reset(args.gpu, args.state)
        if args.command == "fidelity":
            from . import fidelity

            return fidelity.main(args.getters, args.preset, without_nvlink=args.without_nvlink, allow=args.allow,
                                 lib=args.lib, build_dir=args.out)
        if args.command == "process":
            if args.action == "add":
                hardware.add_process(args.gpu, args.pid, args.name, args.used_mib, args.gi, args.ci, args.state)
            else:
                hardware.remove_process(args.gpu, args.pid, args.state)
            print(f"process {args.pid} {'started on' if args.action == 'add' else 'ended on'} GPU {args.gpu}")
            return 0
        return cmd_mps_client(args.action, args.pid, args.uid)
    except (CliError, hardware.HardwareError, store.StateError) as exc:
        print(f"gpusim: {exc}", file=sys.stderr)
        return 1
    except (OSError, RuntimeError) as exc:
        print(f"gpusim: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
