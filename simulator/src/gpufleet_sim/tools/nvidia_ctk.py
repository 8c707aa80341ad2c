"""Simulated ``nvidia-ctk``: ``runtime configure`` for docker/containerd/crio, ``cdi generate|list``, ``--version``.

Runtime configuration merges into what is there, like the real toolkit: docker's daemon.json keeps every key;
containerd and CRI-O get a drop-in file (plus an ``imports`` entry in containerd's config.toml, whose content is
kept). Running it twice gives byte-identical files.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tomllib
from pathlib import Path
from typing import Any

from . import _common, ctk_cdi
from ._common import ToolError

RUNTIME_BINARY = "/usr/bin/nvidia-container-runtime"
DEFAULT_CONFIGS = {"docker": "/etc/docker/daemon.json", "containerd": "/etc/containerd/config.toml",
                   "crio": "/etc/crio/crio.conf"}
HEADER = "# Drop-in written by nvidia-ctk (simulated NVIDIA Container Toolkit). Do not edit.\n"


def info(message: str) -> None:
    """Log like the toolkit (logrus text format on stderr)."""
    print(f"INFO[0000] {message}", file=sys.stderr)


def write_if_changed(path: Path, content: str) -> bool:
    """Write ``content`` when it differs from the file; return whether it was written."""
    try:
        if path.read_text(encoding="utf-8") == content:
            return False
    except OSError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".nvidia-ctk.tmp")
    tmp.write_text(content, encoding="utf-8")
    if path.exists():
        os.chmod(tmp, path.stat().st_mode & 0o7777)
    os.replace(tmp, path)
    return True


# ------------------------------------------------------------------------------------------------ docker


def docker_config(current: dict[str, Any], set_default: bool, cdi: bool) -> dict[str, Any]:
    """daemon.json with the nvidia runtime merged in; every other key kept."""
    doc: dict[str, Any] = json.loads(json.dumps(current))
    runtimes = doc.setdefault("runtimes", {})
    runtimes["nvidia"] = {"args": [], "path": "nvidia-container-runtime"}
    if set_default:
        doc["default-runtime"] = "nvidia"
    if cdi:
        doc.setdefault("features", {})["cdi"] = True
    return doc


def configure_docker(config: Path, set_default: bool, cdi: bool) -> None:
    """Merge the nvidia runtime into docker's daemon.json."""
    try:
        raw = config.read_text(encoding="utf-8")
    except FileNotFoundError:
        raw = ""
    try:
        current = json.loads(raw) if raw.strip() else {}
    except json.JSONDecodeError as exc:
        raise ToolError(f"unable to load config for runtime docker: unable to parse config: {exc}", 1,
                        to_stdout=False) from exc
    content = json.dumps(docker_config(current, set_default, cdi), indent=4, sort_keys=True) + "\n"
    write_if_changed(config, content)
    info(f"Wrote updated config to {config}")
    info("It is recommended that docker daemon be restarted.")


# ------------------------------------------------------------------------------------------------ containerd


def _containerd_version(text: str) -> int:
    try:
        return int(tomllib.loads(text).get("version", 2)) if text.strip() else 2
    except (tomllib.TOMLDecodeError, ValueError, TypeError):
        return 2


def _runc_systemd_cgroup(text: str, version: int) -> bool:
    try:
        doc = tomllib.loads(text) if text.strip() else {}
    except tomllib.TOMLDecodeError:
        return False
    plugin = "io.containerd.cri.v1.runtime" if version >= 3 else "io.containerd.grpc.v1.cri"
    runc = doc.get("plugins", {}).get(plugin, {}).get("containerd", {}).get("runtimes", {}).get("runc", {})
    return bool(runc.get("options", {}).get("SystemdCgroup", False))


def containerd_dropin(version: int, set_default: bool, cdi: bool, systemd_cgroup: bool) -> str:
    """The TOML of containerd's 99-nvidia.toml drop-in."""
    plugin = '"io.containerd.cri.v1.runtime"' if version >= 3 else '"io.containerd.grpc.v1.cri"'
    base = f"plugins.{plugin}"
    lines = [HEADER.rstrip("\n"), f"version = {version}", "", "[plugins]", "", f"  [{base}]"]
    if cdi:
        lines.append("    enable_cdi = true")
    lines += ["", f"    [{base}.containerd]"]
    if set_default:
        lines.append('      default_runtime_name = "nvidia"')
    lines += ["", f"      [{base}.containerd.runtimes]", "",
              f"        [{base}.containerd.runtimes.nvidia]",
              "          privileged_without_host_devices = false",
              '          runtime_engine = ""',
              '          runtime_root = ""',
              '          runtime_type = "io.containerd.runc.v2"', "",
              f"          [{base}.containerd.runtimes.nvidia.options]",
              f'            BinaryName = "{RUNTIME_BINARY}"']
    if systemd_cgroup:
        lines.append("            SystemdCgroup = true")
    return "\n".join(lines) + "\n"


_IMPORTS_RE = re.compile(r"^imports\s*=\s*\[(?P<body>[^\]]*)\]", re.MULTILINE)
_VERSION_RE = re.compile(r"^version\s*=\s*\d+\s*$", re.MULTILINE)


def add_import(text: str, pattern: str, version: int) -> str:
    """config.toml with ``pattern`` in its top-level ``imports`` list (content otherwise unchanged)."""
    if not text.strip():
        return f"version = {version}\nimports = [\"{pattern}\"]\n"
    match = _IMPORTS_RE.search(text)
    if match:
        items = [i.strip() for i in match.group("body").split(",") if i.strip()]
        if f'"{pattern}"' in items or f"'{pattern}'" in items:
            return text
        items.append(f'"{pattern}"')
        return text[:match.start()] + f"imports = [{', '.join(items)}]" + text[match.end():]
    version_line = _VERSION_RE.search(text)
    if version_line:
        end = version_line.end()
        return text[:end] + f'\nimports = ["{pattern}"]' + text[end:]
    return f'imports = ["{pattern}"]\n' + text


def configure_containerd(config: Path, dropin: Path | None, set_default: bool, cdi: bool) -> None:
    """Write the drop-in and reference it from config.toml."""
    try:
        text = config.read_text(encoding="utf-8")
    except FileNotFoundError:
        text = ""
    version = _containerd_version(text)
    target = dropin or config.parent / "conf.d" / "99-nvidia.toml"
    write_if_changed(target, containerd_dropin(version, set_default, cdi, _runc_systemd_cgroup(text, version)))
    info(f"Wrote updated config to {target}")
    write_if_changed(config, add_import(text, str(target.parent / "*.toml"), version))
    info(f"Wrote updated config to {config}")
    info("It is recommended that containerd daemon be restarted.")


def crio_dropin(set_default: bool) -> str:
    """The TOML of CRI-O's 99-nvidia.toml drop-in."""
    lines = [HEADER.rstrip("\n"), "", "[crio]", "", "  [crio.runtime]"]
    if set_default:
        lines.append('    default_runtime = "nvidia"')
    lines += ["", "    [crio.runtime.runtimes]", "", "      [crio.runtime.runtimes.nvidia]",
              '        monitor_path = "/usr/libexec/crio/conmon"',
              f'        runtime_path = "{RUNTIME_BINARY}"', '        runtime_type = "oci"']
    return "\n".join(lines) + "\n"


def configure_crio(config: Path, dropin: Path | None, set_default: bool) -> None:
    """Write CRI-O's drop-in (crio.conf itself is left alone)."""
    target = dropin or config.parent / "crio.conf.d" / "99-nvidia.toml"
    write_if_changed(target, crio_dropin(set_default))
    info(f"Wrote updated config to {target}")
    info("It is recommended that crio daemon be restarted.")


# ------------------------------------------------------------------------------------------------ CLI


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="nvidia-ctk", description="Tools to configure the NVIDIA Container Toolkit")
    p.add_argument("-v", "--version", action="store_true")
    p.add_argument("-d", "--debug", action="store_true")
    sub = p.add_subparsers(dest="command")
    runtime = sub.add_parser("runtime").add_subparsers(dest="action")
    conf = runtime.add_parser("configure")
    conf.add_argument("--runtime", default="docker", choices=sorted(DEFAULT_CONFIGS))
    conf.add_argument("--config")
    conf.add_argument("--drop-in-config")
    conf.add_argument("--set-as-default", "--nvidia-set-as-default", dest="set_default", action="store_true")
    conf.add_argument("--cdi.enabled", "--enable-cdi", dest="cdi", action="store_true")
    conf.add_argument("--config-mode", default="config-file")
    cdi = sub.add_parser("cdi").add_subparsers(dest="action")
    gen = cdi.add_parser("generate")
    gen.add_argument("--output", default="")
    gen.add_argument("--format", default="yaml", choices=["yaml", "json"])
    gen.add_argument("--device-name-strategy", default="index")
    cdi.add_parser("list")
    return p


def run(argv: list[str], version: str) -> int:
    """Run ``nvidia-ctk``; return the exit status."""
    args = _parser().parse_args(argv)
    if args.version:
        print(f"NVIDIA Container Toolkit CLI version {version}\ncommit: simulated")
        return 0
    if args.command == "runtime" and args.action == "configure":
        config = Path(args.config or DEFAULT_CONFIGS[args.runtime])
        dropin = Path(args.drop_in_config) if args.drop_in_config else None
        if args.runtime == "docker":
            configure_docker(config, args.set_default, args.cdi)
        elif args.runtime == "containerd":
            configure_containerd(config, dropin, args.set_default, args.cdi)
        else:
            configure_crio(config, dropin, args.set_default)
        return 0
    if args.command == "cdi" and args.action == "generate":
        return ctk_cdi.generate(args.output, args.format)
    if args.command == "cdi" and args.action == "list":
        return ctk_cdi.list_devices()
    _parser().print_help()
    return 1


def main(argv: list[str] | None = None, version: str | None = None) -> int:
    """Entry point of ``nvidia-ctk``."""
    return _common.run_main(lambda a: run(a, _common.tool_version(version, "1.18.0")), argv)


if __name__ == "__main__":
    sys.exit(main())
