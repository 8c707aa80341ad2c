"""``nvidia-ctk cdi generate|list``: a CDI specification of the GPUs and MIG devices NVML reports."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

from . import _common

CDI_VERSION = "0.5.0"
KIND = "nvidia.com/gpu"
SPEC_DIRS = ("/etc/cdi", "/var/run/cdi")
CONTROL_NODES = ("/dev/nvidia-modeset", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidiactl")
LIB_DIR = "/usr/lib/x86_64-linux-gnu"
_PLAIN = re.compile(r"^[A-Za-z0-9_/][A-Za-z0-9_./=+-]*$")
_NUMBER = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    text = str(value)
    plain = _PLAIN.match(text) and not _NUMBER.match(text) and text not in ("true", "false", "null")
    return text if plain else json.dumps(text)


def to_yaml(value: Any, indent: int = 0) -> str:
    """A small YAML emitter for the spec (mappings, lists, scalars; lists at their key's indent, like Go's)."""
    pad = " " * indent
    lines: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, (dict, list)) and item:
                lines.append(f"{pad}{key}:")
                lines.append(to_yaml(item, indent + 2 if isinstance(item, dict) else indent))
            else:
                lines.append(f"{pad}{key}: {_scalar(item) if not isinstance(item, (dict, list)) else '[]'}")
    elif isinstance(value, list):
        for item in value:
            if isinstance(item, dict):
                body = to_yaml(item, indent + 2).splitlines()
                lines.append(f"{pad}- {body[0].lstrip()}")
                lines.extend(body[1:])
            else:
                lines.append(f"{pad}- {_scalar(item)}")
    return "\n".join(lines)


def _devices(nv: Any) -> list[dict[str, Any]]:
    devices: list[dict[str, Any]] = []
    all_nodes: list[str] = []
    for index in range(nv.nvmlDeviceGetCount()):
        try:
            handle = nv.nvmlDeviceGetHandleByIndex(index)
            uuid = _common.text(nv.nvmlDeviceGetUUID(handle))
            minor = int(nv.nvmlDeviceGetMinorNumber(handle))
        except nv.NVMLError:
            continue
        node = f"/dev/nvidia{minor}"
        all_nodes.append(node)
        edits = {"deviceNodes": [{"path": node}]}
        devices.append({"name": str(index), "containerEdits": edits})
        devices.append({"name": uuid, "containerEdits": edits})
        devices.extend(_mig_devices(nv, handle, index, node, all_nodes))
    devices.append({"name": "all", "containerEdits": {"deviceNodes": [{"path": n} for n in all_nodes]}})
    return devices


def _mig_devices(nv: Any, handle: Any, index: int, node: str, all_nodes: list[str]) -> list[dict[str, Any]]:
    try:
        current, _pending = nv.nvmlDeviceGetMigMode(handle)
        count = int(nv.nvmlDeviceGetMaxMigDeviceCount(handle)) if current else 0
    except nv.NVMLError:
        return []
    result = []
    for mig_index in range(count):
        try:
            mig = nv.nvmlDeviceGetMigDeviceHandleByIndex(handle, mig_index)
        except nv.NVMLError:
            break
        gi, ci = int(nv.nvmlDeviceGetGpuInstanceId(mig)), int(nv.nvmlDeviceGetComputeInstanceId(mig))
        caps = [f"/dev/nvidia-caps/nvidia-cap{(index * 64 + gi) * 2 + 10}",
                f"/dev/nvidia-caps/nvidia-cap{(index * 64 + gi) * 2 + 11 + ci}"]
        all_nodes.extend(caps)
        edits = {"deviceNodes": [{"path": node}, *({"path": c} for c in caps)]}
        result.append({"name": f"{index}:{mig_index}", "containerEdits": edits})
        result.append({"name": _common.text(nv.nvmlDeviceGetUUID(mig)), "containerEdits": edits})
    return result


def build_spec(nv: Any) -> dict[str, Any]:
    """The whole CDI spec document."""
    driver = _common.text(nv.nvmlSystemGetDriverVersion())
    libs = [f"{LIB_DIR}/libnvidia-ml.so.{driver}"]
    return {
        "cdiVersion": CDI_VERSION,
        "kind": KIND,
        "devices": _devices(nv),
        "containerEdits": {
            "env": ["NVIDIA_VISIBLE_DEVICES=void"],
            "deviceNodes": [{"path": n} for n in CONTROL_NODES],
            "hooks": [{"hookName": "createContainer", "path": "/usr/bin/nvidia-cdi-hook",
                       "args": ["nvidia-cdi-hook", "update-ldcache", "--folder", LIB_DIR]}],
            "mounts": [{"hostPath": p, "containerPath": p, "options": ["ro", "nosuid", "nodev", "bind"]}
                       for p in [*libs, "/usr/bin/nvidia-smi"]],
        },
    }


def generate(output: str, fmt: str) -> int:
    """Write (or print) the spec; return the exit status."""
    nv = _common.load_pynvml()
    try:
        _common.nvml_init(nv)
    except _common.ToolError as exc:
        print(f"ERRO[0000] failed to generate CDI spec: failed to create device CDI specs: failed to initialize "
              f"NVML: {exc.message.splitlines()[0]}", file=sys.stderr)
        return 1
    print('INFO[0000] Auto-detected mode as "nvml"', file=sys.stderr)
    spec = build_spec(nv)
    use_json = fmt == "json" or output.endswith(".json")
    text = json.dumps(spec, indent=2) + "\n" if use_json else "---\n" + to_yaml(spec) + "\n"
    if not output:
        sys.stdout.write(text)
    else:
        path = Path(output)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.chmod(0o644)
        tmp.replace(path)
        print(f'INFO[0000] Generated CDI spec with version {CDI_VERSION}', file=sys.stderr)
    return 0


def spec_devices(path: Path) -> list[str]:
    """``kind=name`` of every device in a spec file this tool (or JSON) wrote."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        doc = json.loads(text)
        return [f"{doc['kind']}={d['name']}" for d in doc.get("devices", [])]
    kind = next((m.group(1) for m in re.finditer(r"^kind: (.+)$", text, re.MULTILINE)), "")
    names = [json.loads(n) if n.startswith('"') else n for n in re.findall(r"^- name: (.+)$", text, re.MULTILINE)]
    return [f"{kind}={n}" for n in names]


def list_devices() -> int:
    """Print the CDI devices of every spec in /etc/cdi and /var/run/cdi."""
    found: list[str] = []
    for folder in SPEC_DIRS:
        base = _common.sys_path(folder)
        for path in sorted(base.glob("*")) if base.is_dir() else []:
            if path.suffix in (".yaml", ".yml", ".json"):
                found.extend(spec_devices(path))
    print(f"INFO[0000] Found {len(found)} CDI devices", file=sys.stderr)
    for name in found:
        print(name)
    return 0
