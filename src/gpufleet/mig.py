"""Offline MIG tools: validate a layout, plan it, import and export NVIDIA mig-parted configs, without any host.

These call the collection's own controller-side code (``plugins/module_utils/mig_layout.py``, ``mig_planner.py``,
``mig_parted.py``, found where :mod:`gpufleet._paths` finds the collection), so the messages are the validator's
own and the plans are the ones the ``nvidia_mig`` module would compute.

A *layout file* is YAML: ``nvidia_mig_layouts: {name: [entry, ...]}`` (as in group_vars, optionally with
``nvidia_mig_layout: name``), a mapping ``{name: [entry, ...]}``, or one layout as a list of entries.

Example::

    from gpufleet import mig

    configs = mig.validate_layout("layouts.yml", model="A100-SXM4-80GB", layout="balanced")
    print(mig.plan_offline("layouts.yml", model="A100-SXM4-80GB", layout="balanced")["summary"])
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

from gpufleet import _paths
from gpufleet.errors import InputError

__all__ = [
    "MigLayoutError",
    "export_mig_parted",
    "import_mig_parted",
    "load_layouts",
    "plan_offline",
    "validate_layout",
]

_MODULE_UTILS = "ansible_collections.gpufleet.nvidia.plugins.module_utils"


class MigLayoutError(InputError):
    """A layout or mig-parted config is not valid; ``problems`` holds the validator's messages, one per problem."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


def _module(name: str) -> ModuleType:
    collections_dir = str(_paths.layout().collections_dir)
    if collections_dir not in sys.path:
        sys.path.append(collections_dir)
    return importlib.import_module(f"{_MODULE_UTILS}.{name}")


def _problems(exc: Exception) -> list[str]:
    problems = getattr(exc, "problems", None)
    if isinstance(problems, list) and problems:
        return [str(p) for p in problems]
    return [str(exc)]


def _read_yaml(path: str | os.PathLike[str], what: str) -> Any:
    try:
        text = Path(path).expanduser().read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"{what} {os.fspath(path)!r} cannot be read: {exc.strerror}; check the path") from exc
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise InputError(f"{what} {os.fspath(path)!r} is not valid YAML: {exc}") from exc


def load_layouts(path: str | os.PathLike[str]) -> tuple[dict[str, list[Any]], str | None]:
    """Read a layout file; returns ``({name: entries}, the selected name or None)``."""
    data = _read_yaml(path, "layout file")
    if isinstance(data, list):
        return {"layout": data}, "layout"
    if isinstance(data, Mapping) and isinstance(data.get("nvidia_mig_layouts"), Mapping):
        selected = data.get("nvidia_mig_layout")
        return dict(data["nvidia_mig_layouts"]), str(selected) if selected else None
    if isinstance(data, Mapping) and data and all(isinstance(v, list) for v in data.values()):
        return {str(k): v for k, v in data.items()}, None
    raise InputError(
        f"layout file {os.fspath(path)!r} holds no layout: expected nvidia_mig_layouts: {{name: [entries]}}, "
        "a mapping of names to entry lists, or a list of entries (see docs/mig.md)"
    )


def _select(layouts: Mapping[str, list[Any]], default: str | None, layout: str | None) -> tuple[str, list[Any]]:
    name = layout or default or (next(iter(layouts)) if len(layouts) == 1 else None)
    if name is None:
        raise InputError(f"the file has several layouts ({', '.join(layouts)}): choose one with --layout NAME")
    if name not in layouts:
        raise InputError(f"no layout named {name!r} in the file; layouts: {', '.join(layouts)}")
    return name, layouts[name]


def _model_gpus(model: str, gpus: int) -> list[dict[str, Any]]:
    profiles = _module("mig_profiles")
    if profiles.find_model(model) is None:
        known = ", ".join(m.name for m in profiles.MODELS)
        raise InputError(f"unknown GPU model {model!r}: use one of {known}")
    if gpus < 1:
        raise InputError(f"--gpus must be at least 1, got {gpus}")
    return [
        {
            "index": i,
            "model": model,
            "mig": {"supported": True, "current": False, "pending": False},
            "gpu_instances": [],
        }
        for i in range(gpus)
    ]


def validate_layout(
    path: str | os.PathLike[str], *, model: str | None = None, gpus: int = 8, layout: str | None = None
) -> dict[str, Any]:
    """Validate the layouts of a file; with ``model``, against ``gpus`` GPUs of that model.

    Returns ``{"layouts": {name: [GpuConfig dict, ...] | None}}`` (``None``: checked for structure only, no
    model given). Raises :class:`MigLayoutError` with the validator's messages.
    """
    layouts, default = load_layouts(path)
    names = [_select(layouts, default, layout)[0]] if layout else list(layouts)
    mig_layout = _module("mig_layout")
    problems: list[str] = []
    checked: dict[str, Any] = {}
    gpu_list = _model_gpus(model, gpus) if model is not None else []
    for name in names:
        try:
            if model is None:
                mig_layout.parse_entries(layouts[name])
                checked[name] = None
            else:
                configs = mig_layout.validate(layouts[name], gpu_list)
                checked[name] = [c.to_dict() for c in configs]
        except ValueError as exc:
            problems.extend(f"layout {name!r}: {p}" for p in _problems(exc))
    if problems:
        raise MigLayoutError(problems)
    return {"layouts": checked, "model": model, "gpus": gpus if model else None}


def _facts_gpus(path: str | os.PathLike[str], host: str | None) -> list[Any]:
    data = _read_yaml(path, "facts file")
    if isinstance(data, Mapping) and isinstance(data.get("hosts"), Mapping):  # gpufleet facts --json
        hosts = data["hosts"]
        name = host or (next(iter(hosts)) if len(hosts) == 1 else None)
        if name is None or name not in hosts:
            raise InputError(f"the facts file has hosts {', '.join(hosts)}: choose one with --host NAME")
        data = (hosts[name].get("module_data") or {}).get("facts") or {}
    if isinstance(data, Mapping) and isinstance(data.get("gpu_facts"), Mapping):
        data = data["gpu_facts"]
    if isinstance(data, Mapping) and isinstance(data.get("gpus"), list):
        return list(data["gpus"])
    raise InputError(
        f"facts file {os.fspath(path)!r} holds no GPUs: expected the output of `gpufleet facts --json`, or "
        "gpu_facts' result ({gpus: [...]})"
    )


def plan_offline(
    path: str | os.PathLike[str],
    *,
    model: str | None = None,
    facts: str | os.PathLike[str] | None = None,
    host: str | None = None,
    gpus: int = 8,
    layout: str | None = None,
) -> dict[str, Any]:
    """Plan a layout without hosts: against ``gpus`` GPUs of ``model`` with MIG off and empty, or against the GPUs
    of a saved facts file (``gpufleet facts --json`` output or a gpu_facts result).

    Returns ``{"layout": name, "plan": [per-GPU plan dict], "summary": str}``.
    """
    if (model is None) == (facts is None):
        raise InputError("an offline plan needs exactly one of --model MODEL or --facts FILE")
    layouts, default = load_layouts(path)
    name, entries = _select(layouts, default, layout)
    current = _model_gpus(model, gpus) if model is not None else _facts_gpus(facts or "", host)
    mig_layout = _module("mig_layout")
    planner = _module("mig_planner")
    try:
        desired = mig_layout.validate(entries, current)
        plans = planner.plan(current, desired)
    except ValueError as exc:
        raise MigLayoutError([f"layout {name!r}: {p}" for p in _problems(exc)]) from exc
    plan_dicts = [p.to_dict() if hasattr(p, "to_dict") else p for p in plans]
    return {
        "layout": name,
        "plan": json.loads(json.dumps(plan_dicts, default=str)),
        "summary": planner.summarize(plans),
    }


def import_mig_parted(path: str | os.PathLike[str], *, config: str | None = None) -> dict[str, Any]:
    """Read a mig-parted config (``version: v1``, ``mig-configs``); returns ``{"nvidia_mig_layouts": {...}}``
    (with ``config``, only that label)."""
    parted = _module("mig_parted")
    try:
        size = Path(path).expanduser().stat().st_size
    except OSError as exc:
        raise InputError(f"mig-parted config {os.fspath(path)!r} cannot be read: {exc.strerror}; check the path") \
            from exc
    if parted.too_large(size):
        raise MigLayoutError([parted.too_large(size)])
    doc = _read_yaml(path, "mig-parted config")
    try:
        layouts = parted.from_mig_parted(doc)
    except ValueError as exc:
        raise MigLayoutError(_problems(exc)) from exc
    if config is not None:
        if config not in layouts:
            raise InputError(f"no mig-config {config!r} in the file; available: {', '.join(layouts)}")
        layouts = {config: layouts[config]}
    return {"nvidia_mig_layouts": layouts}


def export_mig_parted(
    path: str | os.PathLike[str], *, layout: str | None = None, allow_lossy: bool = False
) -> dict[str, Any]:
    """Write the layouts of a file (or one, with ``layout``) as a mig-parted ``version: v1`` config."""
    layouts, _default = load_layouts(path)
    if layout is not None:
        name, entries = _select(layouts, None, layout)
        layouts = {name: entries}
    parted = _module("mig_parted")
    try:
        result: dict[str, Any] = parted.to_mig_parted(layouts, allow_lossy=allow_lossy)
    except ValueError as exc:
        raise MigLayoutError(_problems(exc)) from exc
    return result
