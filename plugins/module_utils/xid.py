# Copyright: gpufleet contributors
# SPDX-License-Identifier: Apache-2.0 (see LICENSE)
"""XID events judged by NVIDIA's catalogue (:mod:`xid_catalogue`), and repeated events counted once.

An event is ``{"code": int, "text": str | None, "time": float | None, "source": "kernel" | "nvml"}`` (``text`` is
what follows the code on the kernel-log line; NVML events have none). :func:`classify` gives one event its level
(INFO / WARNING / CRITICAL), its action on the ladder and the catalogue's words; :func:`aggregate` folds events
with the same code and subcode into one entry with a ``count`` (10,000 XID 95 lines are one entry, count 10000).

Rules beyond the table:

* 144-150 (NVLink5): the catalogue's bucket is ``WORKFLOW_NVLINK5_ERR``: the severity word in the event's text
  decides (``Nonfatal`` -> INFO, ``Fatal`` -> CRITICAL reset). Without text (an NVML event) the severity is not
  known: WARNING, drain, and the entry says why.
* 154 (recovery action changed): the action named in the text (GPU reset, node reboot, drain P2P...).
* A code the catalogue does not list, or lists without a resolution bucket (162-170): WARNING, action none: look it
  up, never "harmless".
* 171/172 (uncorrectable DRAM/SRAM error, the catalogue's "additional to Xid 48"): judged as Xid 48.
"""

from __future__ import annotations

import re
from typing import Any

from ansible_collections.gpufleet.nvidia.plugins.module_utils import xid_catalogue as cat

LEVELS = ("PASS", "INFO", "WARNING", "UNKNOWN", "CRITICAL")
_LEVEL_RANK = {level: rank for rank, level in enumerate(LEVELS)}
_ACTION_RANK = {action: rank for rank, action in enumerate(cat.ACTIONS)}
_NVLINK5 = range(144, 151)
_SEVERITY = re.compile(r"\b(nonfatal|fatal)\b", re.IGNORECASE)
_UNIT = re.compile(r"^\s*([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)*)\b")


def worst_level(levels: list[str]) -> str:
    """The most severe of ``levels`` (PASS for none); UNKNOWN ranks below CRITICAL and above WARNING."""
    return max(levels, key=_LEVEL_RANK.__getitem__, default="PASS")


def worst_action(actions: list[str]) -> str:
    """The highest step of the ladder among ``actions`` (``none`` for none)."""
    return max(actions, key=_ACTION_RANK.__getitem__, default="none")


def _nvlink5(text: str | None) -> tuple[str | None, str, str, str]:
    """``(subcode, level, action, why)`` of an NVLink5 event from its text."""
    if not text:
        return None, "WARNING", "drain", "severity unknown: the event has no text (NVML event); read the kernel log"
    unit = _UNIT.match(text)
    severity = _SEVERITY.search(text)
    subcode = " ".join(p for p in ((unit.group(1) if unit else None),
                                   (severity.group(1).capitalize() if severity else None)) if p) or None
    if severity is None:
        return subcode, "WARNING", "drain", "no Fatal/Nonfatal severity in the event text"
    level, action = cat.NVLINK5_SEVERITIES[severity.group(1).lower()]
    return subcode, level, action, f"{severity.group(1).capitalize()} NVLink5 error"


def _xid154(text: str | None) -> tuple[str | None, str, str, str]:
    """``(subcode, level, action, why)`` of a recovery-action-changed event from its text."""
    lowered = (text or "").lower()
    for phrase in sorted(cat.XID_154_ACTIONS, key=len, reverse=True):
        if phrase != "none" and phrase in lowered:
            level, action = cat.XID_154_ACTIONS[phrase]
            return phrase, level, action, f"the driver asks for: {phrase}"
    return None, "WARNING", "drain", "the recovery action is not named in the event text; read NVML field 230"


def classify(event: dict[str, Any]) -> dict[str, Any]:
    """Judge one event: ``{code, subcode, level, action, mnemonic, description, immediate, investigatory, why}``."""
    code = int(event["code"])
    if code < 0:  # NVML's event data and the kernel's "Xid (...): N" are unsigned: this reading is malformed
        raise ValueError(f"XID code {code} is negative")
    text = event.get("text")
    entry = cat.CATALOGUE.get(code)
    if entry is None:
        return {"code": code, "subcode": None, "level": "WARNING", "action": "none", "mnemonic": None,
                "description": "not in gpufleet's copy of NVIDIA's XID catalogue", "immediate": None,
                "investigatory": None, "why": f"unknown XID; look it up at {cat.SOURCE['url']}"}
    mnemonic, description, immediate, investigatory = entry
    subcode = None
    if code in _NVLINK5:
        subcode, level, action, why = _nvlink5(text)
    elif code == 154:
        subcode, level, action, why = _xid154(text)
    elif code in cat.DETAIL_OF:
        base = cat.DETAIL_OF[code]
        level, action = cat.BUCKETS[cat.CATALOGUE[base][2]]
        why = f"details of XID {base} ({cat.CATALOGUE[base][1]}): judged as XID {base}"
    elif not immediate:
        level, action = cat.BUCKETS[immediate]
        why = f"NVIDIA's catalogue gives no resolution for this code yet; look it up at {cat.SOURCE['url']}"
    else:
        level, action = cat.BUCKETS[immediate]
        why = f"NVIDIA's immediate action: {immediate}"
    return {"code": code, "subcode": subcode, "level": level, "action": action, "mnemonic": mnemonic,
            "description": description, "immediate": immediate, "investigatory": investigatory, "why": why}


def aggregate(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Fold events into one entry per (code, subcode), with ``count``, ``first``/``last`` time and ``sources``.

    Entries are ordered most severe first, then by code.
    """
    entries: dict[tuple[int, str | None], dict[str, Any]] = {}
    for event in events:
        judged = classify(event)
        key = (judged["code"], judged["subcode"])
        entry = entries.get(key)
        if entry is None:
            entry = entries[key] = dict(judged, count=0, first=None, last=None, sources=[])
        entry["count"] += 1
        when = event.get("time")
        if when is not None:
            entry["first"] = when if entry["first"] is None else min(entry["first"], when)
            entry["last"] = when if entry["last"] is None else max(entry["last"], when)
        source = event.get("source")
        if source and source not in entry["sources"]:
            entry["sources"].append(source)
    return sorted(entries.values(), key=lambda e: (-_LEVEL_RANK[e["level"]], e["code"], e["subcode"] or ""))


def describe(entry: dict[str, Any]) -> str:
    """One phrase for an entry: ``XID 95 (Uncontained ECC error) x10000: reset_gpu``."""
    sub = f" {entry['subcode']}" if entry.get("subcode") else ""
    times = f" x{entry['count']}" if entry["count"] > 1 else ""
    return f"XID {entry['code']}{sub} ({entry['description']}){times}: {entry['action']}"
