# Copyright: gpufleet contributors
# SPDX-License-Identifier: Apache-2.0 (see LICENSE)
"""The driver's ``NVRM: Xid`` lines of the kernel log within a window, from the first source that can be read.

The NVIDIA driver writes every XID to the kernel log (``NVRM: Xid (PCI:0000:18:00): 79, pid=..., ...``; NVIDIA's
XID catalogue). Hosts keep that log in different places, so the sources are tried in order (``SOURCES``):

* ``journal``: ``journalctl -k`` of the window - but only when the journal holds this boot's kernel messages at
  all (``journalctl -k -b -n 1``): journald in a container, or with ``ReadKMsg=no``, answers an empty log with
  success, and reading that as "no XID" would be a false green;
* ``kmsg``: ``/dev/kmsg``, the kernel's own ring buffer (records ``priority,sequence,microseconds,flags;text``,
  the kernel's Documentation/ABI/testing/dev-kmsg), read without blocking; the real H200 VM of
  ``tests/data/ground-truth`` had no journal and this source;
* ``dmesg``: ``dmesg`` (``[seconds] text`` lines), which also works where ``/dev/kmsg`` is absent but syslog(2)
  is allowed.

Ring-buffer timestamps count from boot; they are placed in wall time as ``dmesg`` does (now minus
``CLOCK_BOOTTIME``). The result says which source was read and why each earlier one was not; only when none can
be read is the window unknown. Pure parsing in :func:`xids_in`, :func:`kmsg_lines`, :func:`dmesg_lines`.
"""

from __future__ import annotations

import errno
import os
import re
import time
from collections.abc import Callable
from typing import Any

SOURCES = ("journal", "kmsg", "dmesg")
KMSG = "/dev/kmsg"
MAX_KMSG_BYTES = 16 * 1024 * 1024  # the largest ring buffer (log_buf_len) is 32 MiB of records; text is less
_XID = re.compile(r"NVRM: Xid \(PCI:(?P<pci>[0-9A-Fa-f]+:[0-9A-Fa-f]+:[0-9A-Fa-f]+)(?:\.[0-9A-Fa-f])?\): "
                  r"(?P<code>\d+)(?:,\s*(?P<text>.*))?$")
_JOURNAL_LINE = re.compile(r"^\s*(?P<time>\d+(?:\.\d+)?)\s(?P<text>.*)$")
_DMESG_LINE = re.compile(r"^(?:<\d+>)?\[\s*(?P<time>\d+\.\d+)\]\s?(?P<text>.*)$")
_KMSG_RECORD = re.compile(r"^(?P<prefix>\d+),(?P<seq>\d+),(?P<usec>\d+),[^;]*;(?P<text>.*)$")

Runner = Callable[[list[str]], tuple[int, str, str]]


def bus_key(bus_id: str) -> tuple[int, int, int] | None:
    """Return ``(domain, bus, device)`` of a PCI bus id in NVML (``00000000:18:00.0``) or kernel (``0000:18:00``)
    spelling, so both compare equal; None when it does not parse."""
    match = re.match(r"^(?:([0-9A-Fa-f]+):)?([0-9A-Fa-f]+):([0-9A-Fa-f]+)(?:\.[0-9A-Fa-f])?$", bus_id.strip())
    if not match:
        return None
    return int(match.group(1) or "0", 16), int(match.group(2), 16), int(match.group(3), 16)


def xids_in(lines: list[tuple[float, str]], since: float, source: str) -> list[dict[str, Any]]:
    """``[{bus, code, text, time, source}]`` for every ``NVRM: Xid`` line at or after ``since`` (a Unix time).

    ``text`` is what follows the code (the subcode and severity of NVLink5 XIDs 144-150 are in it)."""
    out = []
    for when, text in lines:
        match = _XID.search(text)
        if not match or when < since:
            continue
        out.append({"bus": bus_key(match.group("pci")), "code": int(match.group("code")),
                    "text": (match.group("text") or "").strip() or None, "time": when, "source": source})
    return out


def _timed(text: str, pattern: re.Pattern[str], when: Callable[[re.Match[str]], float]) -> list[tuple[float, str]]:
    """``(Unix time, text)`` of every line of ``text`` that ``pattern`` matches (others, such as a kmsg record's
    continuation lines, are left out)."""
    return [(when(m), m.group("text")) for m in map(pattern.match, text.splitlines()) if m]


def journal_lines(text: str) -> list[tuple[float, str]]:
    """``(Unix time, text)`` of ``journalctl -o short-unix`` output."""
    return _timed(text, _JOURNAL_LINE, lambda m: float(m.group("time")))


def kmsg_lines(text: str, boot_time: float) -> list[tuple[float, str]]:
    """``(Unix time, text)`` of ``/dev/kmsg`` records (continuation lines, which start with a space, skipped)."""
    return _timed(text, _KMSG_RECORD, lambda m: boot_time + int(m.group("usec")) / 1e6)


def dmesg_lines(text: str, boot_time: float) -> list[tuple[float, str]]:
    """``(Unix time, text)`` of ``dmesg`` lines (``[  123.456789] text``); lines without a time are left out."""
    return _timed(text, _DMESG_LINE, lambda m: boot_time + float(m.group("time")))


def boot_time() -> float:
    """The Unix time the kernel booted, as ``dmesg`` computes it (now minus ``CLOCK_BOOTTIME``)."""
    return time.time() - time.clock_gettime(time.CLOCK_BOOTTIME)


def read_kmsg(path: str = KMSG) -> str:
    """Every record ``path`` holds now: ``/dev/kmsg`` gives one record per read and EAGAIN at the end (opened
    without blocking); a record rotated away while reading (EPIPE) is skipped. Raises OSError when it cannot be
    opened or read."""
    chunks: list[bytes] = []
    size = 0
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        while size < MAX_KMSG_BYTES:
            try:
                chunk = os.read(fd, 8192)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.EPIPE:
                    continue
                raise
            if not chunk:
                break
            chunks.append(chunk if chunk.endswith(b"\n") else chunk + b"\n")
            size += len(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks).decode("utf-8", "replace")


def _journal(run: Runner, which: Callable[[str], str | None], since: float) -> tuple[list[dict[str, Any]], str | None]:
    journalctl = which("journalctl")
    if journalctl is None:
        return [], "journalctl not found"
    rc, out, err = run([journalctl, "-k", "-b", "-q", "--no-pager", "-n", "1"])
    if rc != 0:
        return [], f"journalctl -k failed (rc {rc}): {(err or out).strip()[:200]}"
    if not out.strip():
        return [], "the journal holds no kernel message of this boot (journald does not read the kernel log here)"
    rc, out, err = run([journalctl, "-k", "-q", "--no-pager", "-o", "short-unix", "--since", f"@{int(since)}"])
    if rc != 0:
        return [], f"journalctl -k failed (rc {rc}): {(err or out).strip()[:200]}"
    return xids_in(journal_lines(out), since, "kernel"), None


def _kmsg(path: str, since: float) -> tuple[list[dict[str, Any]], str | None]:
    try:
        text = read_kmsg(path)
    except OSError as exc:
        return [], f"{path}: {exc.strerror or exc}"
    return xids_in(kmsg_lines(text, boot_time()), since, "kernel"), None


def _dmesg(run: Runner, which: Callable[[str], str | None], since: float) -> tuple[list[dict[str, Any]], str | None]:
    dmesg = which("dmesg")
    if dmesg is None:
        return [], "dmesg not found"
    rc, out, err = run([dmesg])
    if rc != 0:
        return [], f"dmesg failed (rc {rc}): {(err or out).strip()[:200]}"
    return xids_in(dmesg_lines(out, boot_time()), since, "kernel"), None


def kernel_xids(run: Runner, which: Callable[[str], str | None], window_s: int, sources: list[str],
                kmsg_path: str = KMSG) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """XID lines of the kernel log in the window from the first readable source of ``sources``.

    Returns ``(events, {"source": "kernel", "read_from": name or None, "error": why none could be read or None,
    "tried": {name: why it was not read}, "window_s": window_s})``.
    """
    since = time.time() - window_s
    tried: dict[str, str] = {}
    for name in sources:
        if name == "journal":
            events, error = _journal(run, which, since)
        elif name == "kmsg":
            events, error = _kmsg(kmsg_path, since)
        elif name == "dmesg":
            events, error = _dmesg(run, which, since)
        else:
            events, error = [], f"unknown source {name!r} (choose from {', '.join(SOURCES)})"
        if error is None:
            return events, {"source": "kernel", "read_from": name, "error": None, "tried": tried,
                            "window_s": window_s}
        tried[name] = error
    why = "; ".join(f"{name}: {error}" for name, error in tried.items()) or "no source configured"
    return [], {"source": "kernel", "read_from": None, "error": why, "tried": tried, "window_s": window_s}


def parse_journal(text: str, since: float) -> list[dict[str, Any]]:
    """The XIDs of ``journalctl -k -o short-unix`` output at or after ``since``."""
    return xids_in(journal_lines(text), since, "kernel")


def merge_kernel_xids(meas: dict[str, Any], xids: list[dict[str, Any]]) -> None:
    """Add kernel-log XIDs to the GPU with the same PCI bus id (lines for unknown devices and lost GPUs are
    dropped). They are kept also where NVML's event wait failed (``errors["xid"]``): the kernel log covers the
    window, and the xid check judges what it read."""
    by_bus = {bus_key(str(g.get("pci_bus_id") or "")): g for g in meas.get("gpus", []) if g.get("pci_bus_id")}
    for event in xids:
        gpu = by_bus.get(event["bus"])
        if gpu is None or gpu.get("lost"):
            continue
        gpu.setdefault("values", {}).setdefault("xid", []).append({k: v for k, v in event.items() if k != "bus"})
