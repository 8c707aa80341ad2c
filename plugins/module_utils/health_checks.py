# Copyright: gpufleet contributors
# SPDX-License-Identifier: Apache-2.0 (see LICENSE)
"""Pure evaluation of GPU health measurements against thresholds.

Nothing here talks to NVML or runs a command: :mod:`nvml_health` (and the module's command reads) produce a
*measurement* document, and :func:`evaluate_host` turns it into a list of checks. Every check is a dict::

    {"name": "ecc_uncorrected_volatile",
     "gpu": {"index": 0, "uuid": "GPU-...", "pci_bus_id": "00000000:18:00.0"},   # None for host-wide checks
     "status": "ok" | "warn" | "fail",
     "value": <what was measured>,
     "threshold": <what it was compared with>,
     "message": "one sentence"}

Measurement document (what :func:`evaluate_host` reads)::

    {"driver_version": "570.172.08", "cuda_version": "12.8", "gpu_count": 8,
     "init_error": None | "message",                    # NVML could not start: one host-wide fail
     "fabric_manager": None | "active" | "inactive" | ..., # systemctl is-active, when an NVSwitch is expected
     "mig_expected": None | {uuid: {...}},              # /etc/gpufleet/mig-state.json, when present
     "gpus": [{"index": 0, "uuid": ..., "pci_bus_id": ..., "lost": False,
               "values": {metric: value}, "unsupported": [metric], "errors": {metric: "message"}}]}

A metric in ``unsupported`` is not applicable to that GPU (NVML answered NOT_SUPPORTED): its check is ``ok`` with
``value`` None and a message that says so, unless the GPU should have it (ECC on a data-centre GPU). A metric in
``errors`` could not be read: its check is ``fail``. Fail closed: a check that cannot read what it needs (a
threshold, the kernel log, a malformed reading) is ``fail`` with the reason, never ``ok``.

The thresholds (``th``) are the module's parameters: the argument spec of ``plugins/modules/gpu_health.py`` is the
one definition of every threshold and its default; nothing here has a default of its own (``th[key]``, never
``th.get(key, default)``), and zero is a threshold like any other.
"""

from __future__ import annotations

from typing import Any

from ansible_collections.gpufleet.nvidia.plugins.module_utils import health_fabric, health_nvlink, recovery, xid
from ansible_collections.gpufleet.nvidia.plugins.module_utils.health_base import DEFAULT_ACTION as DEFAULT_ACTION
from ansible_collections.gpufleet.nvidia.plugins.module_utils.health_base import FAIL as FAIL
from ansible_collections.gpufleet.nvidia.plugins.module_utils.health_base import LEVEL_OF as LEVEL_OF
from ansible_collections.gpufleet.nvidia.plugins.module_utils.health_base import OK as OK
from ansible_collections.gpufleet.nvidia.plugins.module_utils.health_base import UNKNOWN as UNKNOWN
from ansible_collections.gpufleet.nvidia.plugins.module_utils.health_base import WARN as WARN
from ansible_collections.gpufleet.nvidia.plugins.module_utils.health_base import _not_value, _reading
from ansible_collections.gpufleet.nvidia.plugins.module_utils.health_base import check as check
from ansible_collections.gpufleet.nvidia.plugins.module_utils.health_base import identity as identity
from ansible_collections.gpufleet.nvidia.plugins.module_utils.health_base import (
    virtualization_mode as virtualization_mode,
)
from ansible_collections.gpufleet.nvidia.plugins.module_utils.health_base import worst as worst

# nvmlClocksEventReason* bits (nvml.h; pynvml nvmlClocksEventReason*).
CLOCK_EVENT_BITS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
CLOCK_EVENT_FAIL = 0x8 | 0x40 | 0x80
CLOCK_EVENT_WARN = 0x20

# nvmlBrandType_t values of data-centre GPUs (nvml.h): NVML_BRAND_TESLA (2), NVML_BRAND_NVIDIA (14, A100/H100...).
DATA_CENTRE_BRANDS = (2, 14)
ECC_MODES = ("auto", "enabled", "disabled", "any")


def decode_clock_events(mask: int) -> list[str]:
    """Return the names of the clock-event reason bits set in ``mask`` (unknown bits as hex)."""
    names = [label for bit, label in sorted(CLOCK_EVENT_BITS.items()) if mask & bit]
    unknown = mask & ~sum(CLOCK_EVENT_BITS)
    if unknown:
        names.append(hex(unknown))
    return names


# --------------------------------------------------------------------------------------------------- host checks


def check_gpu_count(meas: dict[str, Any], th: dict[str, Any]) -> dict:
    """GPUs NVML sees vs ``expected_gpu_count`` (exact match, as deepops, Azure and GCM)."""
    found = meas.get("gpu_count")
    expected = th["expected_gpu_count"]
    if expected is None:
        return check("gpu_count", None, OK, found, None, f"{found} GPU(s) found; no expected count set")
    if found != expected:
        return check("gpu_count", None, FAIL, found, expected,
                     f"{found} GPU(s) found, {expected} expected; check lspci -d 10de: and the kernel log")
    return check("gpu_count", None, OK, found, expected, f"{found} GPU(s) found as expected")


def driver_matches(found: str | None, expected: str) -> bool:
    """True when ``found`` equals ``expected`` or starts with it at a dot boundary ("570" matches "570.172.08")."""
    if found is None:
        return False
    return found == expected or found.startswith(expected + ".")


def check_driver_version(meas: dict[str, Any], th: dict[str, Any]) -> dict:
    """Driver version vs ``expected_driver_version`` (exact, or a branch/prefix at a dot boundary)."""
    found = meas.get("driver_version")
    expected = th["expected_driver_version"]
    if not expected:
        return check("driver_version", None, OK, found, None, f"driver {found}; no expected version set")
    if driver_matches(found, str(expected)):
        return check("driver_version", None, OK, found, expected, f"driver {found} matches {expected}")
    return check("driver_version", None, FAIL, found, expected,
                 f"driver {found} is loaded but {expected} is expected; install the pinned driver and reboot")


def check_fabric_manager(meas: dict[str, Any], th: dict[str, Any]) -> dict:
    """nvidia-fabricmanager must be active on NVSwitch systems (gpud fabric-manager; deepops DGX NHC)."""
    if not th["nvswitch_expected"]:
        return check("fabric_manager", None, OK, None, None, "no NVSwitch expected; fabric manager not checked")
    state = meas.get("fabric_manager")
    if state == "active":
        return check("fabric_manager", None, OK, state, "active", "nvidia-fabricmanager is active")
    return check("fabric_manager", None, FAIL, state, "active",
                 f"nvidia-fabricmanager is {state or 'unknown'} on an NVSwitch system; GPUs cannot use NVLink "
                 "until it runs: systemctl start nvidia-fabricmanager")


def check_vbios_consistency(meas: dict[str, Any], th: dict[str, Any]) -> dict:
    """All GPUs of one model run the same VBIOS, and the expected one when set (Azure, GCM)."""
    by_model: dict[str, set[str]] = {}
    for gpu in meas.get("gpus", []):
        vbios = gpu.get("values", {}).get("vbios_version")
        if vbios is not None:
            by_model.setdefault(str(gpu.get("values", {}).get("name")), set()).add(str(vbios))
    versions = sorted({v for vs in by_model.values() for v in vs})
    expected = th["expected_vbios_version"]
    mixed = sorted(model for model, vs in by_model.items() if len(vs) > 1)
    if mixed:
        return check("vbios_consistency", None, FAIL, versions, expected or "all equal",
                     f"GPUs of the same model ({', '.join(mixed)}) run different VBIOS versions "
                     f"{', '.join(versions)}; flash them to one version")
    if expected and any(v != expected for v in versions):
        return check("vbios_consistency", None, FAIL, versions, expected,
                     f"VBIOS {', '.join(versions)} found, {expected} expected")
    return check("vbios_consistency", None, OK, versions, expected or "all equal",
                 f"VBIOS consistent: {', '.join(versions) or 'none readable'}")


# --------------------------------------------------------------------------------------------------- per-GPU checks


def check_gpu_model(gpu: dict[str, Any], th: dict[str, Any]) -> dict:
    """GPU name contains one of ``expected_gpu_models`` (case-insensitive)."""
    name = gpu.get("values", {}).get("name")
    models = [str(m) for m in th["expected_gpu_models"] or []]
    if not models:
        return check("gpu_model", gpu, OK, name, None, f"{name}; no expected model set")
    if name and any(m.lower() in name.lower() for m in models):
        return check("gpu_model", gpu, OK, name, models, f"{name} is an expected model")
    return check("gpu_model", gpu, FAIL, name, models, f"{name} is not one of the expected models {', '.join(models)}")


def check_persistence(gpu: dict[str, Any], th: dict[str, Any]) -> dict:
    """Persistence mode enabled (gpud, Azure): without it the driver tears down state between clients."""
    want = bool(th["persistence_mode_expected"])
    miss = _not_value("persistence_mode", gpu, "persistence_mode", "enabled" if want else "any")
    if miss:
        return miss
    enabled = bool(gpu["values"]["persistence_mode"])
    value = "enabled" if enabled else "disabled"
    if want and not enabled:
        return check("persistence_mode", gpu, FAIL, value, "enabled",
                     "persistence mode is disabled; enable nvidia-persistenced")
    return check("persistence_mode", gpu, OK, value, "enabled" if want else "any", f"persistence mode {value}")


def expected_ecc(gpu: dict[str, Any], th: dict[str, Any]) -> tuple[str, str]:
    """Return ``(mode, why)``: the ECC mode this GPU should run (``enabled``, ``disabled`` or ``any``).

    ``ecc_mode_expected: auto`` expects ``enabled`` on a data-centre GPU (NVML brand Tesla or NVIDIA: A100, H100,
    T4...) and ``any`` on others (workstation boards ship with ECC off). A brand that cannot be read is treated as
    data-centre (fail closed).
    """
    want = str(th["ecc_mode_expected"])
    if want != "auto":
        return want, f"ecc_mode_expected is {want}"
    kind, brand = _reading(gpu, "brand")
    if kind != "value" or brand is None:
        return "enabled", "the GPU's brand could not be read, so ECC is expected like on a data-centre GPU"
    if int(brand) in DATA_CENTRE_BRANDS:
        return "enabled", "a data-centre GPU runs with ECC"
    return "any", "not a data-centre GPU"


def check_ecc_mode(gpu: dict[str, Any], th: dict[str, Any]) -> dict:
    """ECC mode vs the expected mode (``ecc_mode_expected``; ``auto``: enabled on data-centre GPUs)."""
    want, why = expected_ecc(gpu, th)
    kind, mode = _reading(gpu, "ecc_mode")
    if kind == "error":
        return check("ecc_mode", gpu, FAIL, None, want, f"could not read ecc_mode: {mode}", level=UNKNOWN)
    if kind == "unsupported":
        if th["ecc_mode_expected"] == "enabled":
            return check("ecc_mode", gpu, FAIL, None, want,
                         "ECC is expected enabled but this GPU does not support ECC (NVML: not supported)")
        return check("ecc_mode", gpu, OK, None, want, "ECC is not supported on this GPU; not applicable")
    if mode is None:
        return check("ecc_mode", gpu, FAIL, None, want, "the ECC mode was not read; cannot tell whether ECC is on",
                     level=UNKNOWN)
    current = "enabled" if mode["current"] else "disabled"
    pending = "enabled" if mode["pending"] else "disabled"
    value = {"current": current, "pending": pending}
    if want != "any" and current != want:
        fix = "nvidia-smi -i <gpu> -e 1" if want == "enabled" else "nvidia-smi -i <gpu> -e 0"
        later = " (the change is pending a GPU reset)" if pending == want else ""
        return check("ecc_mode", gpu, FAIL, value, want,
                     f"ECC is {current} but expected {want} ({why}){later}; set it with {fix} and reset the GPU")
    if pending != current:
        return check("ecc_mode", gpu, WARN, value, want, f"ECC is {current} and will be {pending} after a GPU reset")
    return check("ecc_mode", gpu, OK, value, want, f"ECC {current}")


def check_ecc(gpu: dict[str, Any], th: dict[str, Any]) -> list[dict]:
    """Volatile ECC counts: uncorrectable (GCM: > 0 critical) and correctable (Azure / GCM limits).

    Counts that NVML does not report (ECC off or not supported) are not applicable only on a GPU that is not
    expected to run ECC; on one that is, the counts cannot be checked and both checks fail.
    """
    unc_limit = int(th["ecc_uncorrected_volatile_fail"])
    warn, fail = int(th["ecc_corrected_volatile_warn"]), int(th["ecc_corrected_volatile_fail"])
    limits = {"warn": warn, "fail": fail}
    kind, _value = _reading(gpu, "ecc")
    want, why = expected_ecc(gpu, th)
    if kind == "unsupported" and want == "enabled":
        msg = f"ECC error counts are not available (NVML: not supported) on a GPU that should count them ({why})"
        return [check("ecc_uncorrected_volatile", gpu, FAIL, None, unc_limit, msg, level=UNKNOWN),
                check("ecc_corrected_volatile", gpu, FAIL, None, limits, msg, level=UNKNOWN)]
    miss = _not_value("ecc_uncorrected_volatile", gpu, "ecc", unc_limit)
    if miss:
        return [miss, dict(miss, name="ecc_corrected_volatile", threshold=limits)]
    ecc = gpu["values"]["ecc"]
    out = []
    unc = int(ecc["uncorrected_volatile"])
    if unc > unc_limit:
        out.append(check("ecc_uncorrected_volatile", gpu, FAIL, unc, unc_limit,
                         f"{unc} uncorrectable ECC error(s) since the last reset (limit {unc_limit}); drain the node "
                         "and reset the GPU", action="reset_gpu"))
    else:
        out.append(check("ecc_uncorrected_volatile", gpu, OK, unc, unc_limit, f"{unc} uncorrectable ECC error(s)"))
    cor = int(ecc["corrected_volatile"])
    if cor > fail:
        out.append(check("ecc_corrected_volatile", gpu, FAIL, cor, limits,
                         f"{cor} correctable ECC errors exceed {fail}; the memory is degrading"))
    elif cor > warn:
        out.append(check("ecc_corrected_volatile", gpu, WARN, cor, limits,
                         f"{cor} correctable ECC errors exceed {warn}; watch this GPU"))
    else:
        out.append(check("ecc_corrected_volatile", gpu, OK, cor, limits, f"{cor} correctable ECC error(s)"))
    return out


def check_retired_pages(gpu: dict[str, Any], th: dict[str, Any]) -> dict:
    """Retired pages (pre-Ampere; N/A on Ampere+ where row remapping replaces it): pending, count limits."""
    limits = {"warn": th["retired_pages_warn"], "fail": th["retired_pages_fail"], "pending": 0}
    miss = _not_value("retired_pages", gpu, "retired_pages", limits)
    if miss:
        return miss
    pages = gpu["values"]["retired_pages"]
    total = int(pages.get("sbe", 0)) + int(pages.get("dbe", 0))
    value = {"sbe": int(pages.get("sbe", 0)), "dbe": int(pages.get("dbe", 0)), "pending": bool(pages.get("pending"))}
    if value["pending"]:
        return check("retired_pages", gpu, FAIL, value, limits,
                     "a page retirement is pending; reset the GPU or reboot to retire it", action="reset_gpu")
    if total > int(th["retired_pages_fail"]):
        return check("retired_pages", gpu, FAIL, value, limits,
                     f"{total} retired pages exceed {th['retired_pages_fail']}: the table is nearly full; "
                     "replace the GPU", action="rma")
    if total > int(th["retired_pages_warn"]):
        return check("retired_pages", gpu, WARN, value, limits,
                     f"{total} retired pages exceed {th['retired_pages_warn']}")
    return check("retired_pages", gpu, OK, value, limits, f"{total} retired page(s), none pending")


def check_remapped_rows(gpu: dict[str, Any], th: dict[str, Any]) -> dict:
    """Row remapping (Ampere+): pending -> fail (reset needed), failure -> fail, uncorrectable > 512 -> fail."""
    limit = int(th["remapped_rows_uncorrectable_fail"])
    limits = {"pending": 0, "failure": 0, "uncorrectable": limit}
    miss = _not_value("remapped_rows", gpu, "remapped_rows", limits)
    if miss:
        return miss
    rows = gpu["values"]["remapped_rows"]
    value = {k: int(rows.get(k, 0)) for k in ("corrected", "uncorrected", "pending", "failure")}
    if value["failure"]:
        return check("remapped_rows", gpu, FAIL, value, limits,
                     "a row remapping failed; the GPU needs hardware inspection (RMA)", action="rma")
    if value["pending"]:
        return check("remapped_rows", gpu, FAIL, value, limits,
                     "a row remapping is pending; reset the GPU or reboot to apply it", action="reset_gpu")
    if value["uncorrected"] > limit:
        return check("remapped_rows", gpu, FAIL, value, limits,
                     f"{value['uncorrected']} rows remapped for uncorrectable errors exceed {limit}", action="rma")
    return check("remapped_rows", gpu, OK, value, limits,
                 f"{value['corrected'] + value['uncorrected']} row(s) remapped, none pending")


def check_xid(gpu: dict[str, Any], th: dict[str, Any], kernel: dict[str, Any] | None = None) -> dict:
    """XID events in the window, judged by NVIDIA's catalogue (:mod:`xid`): the worst entry's level and action.

    Repeated events are one entry with a count (``evidence``); ``value`` lists the distinct codes. ``xid_critical``
    makes codes CRITICAL (reset the GPU) whatever the catalogue says; ``xid_ignore`` drops codes. ``kernel`` is the
    kernel log's ``xid_sources`` entry (None when it was not asked for): where no source of it could be read the
    window is unknown and the check is UNKNOWN (fails) with the reasons, never "no XID event in the window". Where
    NVML's event wait failed but the kernel log was read, the XIDs it read are judged and the check is at least a
    WARNING that names the NVML failure.
    """
    critical = {int(x) for x in th["xid_critical"] or []}
    ignore = {int(x) for x in th["xid_ignore"] or []}
    window = th["xid_window_s"]
    limits = {"window_s": window, "critical": sorted(critical), "ignore": sorted(ignore),
              "catalogue": xid.cat.SOURCE["url"]}
    kernel_error = kernel.get("error") if kernel else None
    kernel_read = kernel is not None and kernel_error is None
    nvml_error = gpu.get("errors", {}).get("xid")
    if nvml_error is None or not kernel_read:
        miss = _not_value("xid", gpu, "xid", limits)
        if miss:
            return miss
    entries = xid.aggregate([e for e in gpu.get("values", {}).get("xid") or [] if int(e["code"]) not in ignore])
    for entry in entries:
        if entry["code"] in critical and entry["level"] != "CRITICAL":
            entry.update(level="CRITICAL", action=xid.worst_action([entry["action"], "reset_gpu"]),
                         why="listed in xid_critical")
    codes = sorted({e["code"] for e in entries})
    level = xid.worst_level([e["level"] for e in entries])
    action = xid.worst_action([e["action"] for e in entries])
    listed = "; ".join(xid.describe(e) for e in entries)
    if kernel_error is not None and level != "CRITICAL":
        seen = f"seen through NVML: {listed}" if entries else "no XID seen through NVML"
        return check("xid", gpu, FAIL, codes, limits,
                     f"the kernel log could not be read ({kernel_error}), so XIDs of the last {window} s are "
                     f"unknown ({seen}); make the journal, /dev/kmsg or dmesg readable, or set xid_kernel_log to "
                     "false to rely on "
                     "NVML events of the moment only", level="UNKNOWN", action=action, evidence=entries)
    where = f" (kernel log: {kernel['read_from']})" if kernel_read and kernel.get("read_from") else ""
    if nvml_error is not None and level in ("PASS", "INFO"):
        found = f"{listed} in the last {window} s" if entries else f"no XID in the last {window} s"
        return check("xid", gpu, WARN, codes, limits,
                     f"NVML's XID events could not be read ({nvml_error}); the kernel log ({kernel['read_from']}) "
                     f"shows {found}", action=action, evidence=entries)
    if not entries:
        return check("xid", gpu, OK, codes, limits, f"no XID event in the window{where}", evidence=entries)
    status = {"CRITICAL": FAIL, "WARNING": WARN}.get(level, OK)
    return check("xid", gpu, status, codes, limits,
                 f"{listed} in the last {window} s (NVIDIA's XID catalogue){where}",
                 level=level, action=action, evidence=entries)


def check_pcie(gpu: dict[str, Any], th: dict[str, Any]) -> list[dict]:
    """PCIe link width below max (fail) and generation below max while busy (warn; idle GPUs down-train)."""
    miss = _not_value("pcie_link_width", gpu, "pcie", "max")
    if miss:
        return [miss, dict(miss, name="pcie_link_gen")]
    pcie = gpu["values"]["pcie"]
    width, max_width = int(pcie["width"]), int(pcie["max_width"])
    gen, max_gen = int(pcie["gen"]), int(pcie["max_gen"])
    if width < max_width:
        status = th["pcie_width_status"]
        width_check = check("pcie_link_width", gpu, status, width, max_width,
                            f"PCIe link trained at x{width}, the GPU supports x{max_width}; reseat the GPU or riser")
    else:
        width_check = check("pcie_link_width", gpu, OK, width, max_width, f"PCIe link x{width}")
    idle = bool(gpu.get("values", {}).get("idle"))
    if gen >= max_gen:
        gen_check = check("pcie_link_gen", gpu, OK, gen, max_gen, f"PCIe gen {gen}")
    elif idle:
        gen_check = check("pcie_link_gen", gpu, OK, gen, max_gen,
                          f"PCIe gen {gen} below gen {max_gen} while the GPU is idle (power saving, expected)")
    else:
        gen_check = check("pcie_link_gen", gpu, th["pcie_gen_status"], gen, max_gen,
                          f"PCIe gen {gen} below gen {max_gen} while the GPU is busy")
    return [width_check, gen_check]


def check_temperature(gpu: dict[str, Any], th: dict[str, Any]) -> dict:
    """GPU temperature vs both NVML thresholds: the slowdown one (or ``temperature_fail_c``) and the shutdown one.

    At or above the shutdown threshold fails whatever else is known; at or above the fail limit fails; within
    ``temperature_warn_margin_c`` of it warns. A fail limit that cannot be known (``temperature_fail_c`` null and the
    slowdown threshold unreadable) fails; an unreadable shutdown threshold warns; both are named in the message.
    """
    own = th["temperature_fail_c"]
    margin = int(th["temperature_warn_margin_c"])
    miss = _not_value("temperature", gpu, "temperature", {"fail": own})
    if miss:
        return dict(miss, status=FAIL, level=UNKNOWN, message=miss["message"] if miss["status"] == FAIL
                    else "the GPU temperature is not reported by NVML; cannot check it")
    temp = gpu["values"]["temperature"]
    current = int(temp["gpu"])
    unreadable = dict(temp.get("unreadable") or {})
    slowdown, shutdown = temp.get("slowdown"), temp.get("shutdown")
    for key, reading in (("slowdown", slowdown), ("shutdown", shutdown)):
        if reading is None:
            unreadable.setdefault(key, "not reported")
    fail_at = int(own) if own is not None else (int(slowdown) if slowdown is not None else None)
    shutdown = int(shutdown) if shutdown is not None else None
    limits = {"warn": None if fail_at is None else fail_at - margin, "fail": fail_at, "shutdown": shutdown}
    notes = "; ".join(f"{key} threshold unreadable: {why}" for key, why in sorted(unreadable.items()))
    suffix = f" ({notes})" if notes else ""
    if shutdown is not None and current >= shutdown:
        return check("temperature", gpu, FAIL, current, limits,
                     f"{current} C reached the shutdown temperature {shutdown} C{suffix}")
    if fail_at is not None and current >= fail_at:
        return check("temperature", gpu, FAIL, current, limits, f"{current} C reached the limit {fail_at} C{suffix}")
    if fail_at is None:
        return check("temperature", gpu, FAIL, current, limits,
                     f"{current} C but no fail temperature is known ({notes}); set temperature_fail_c",
                     level=UNKNOWN)
    if current >= fail_at - margin:
        return check("temperature", gpu, WARN, current, limits, f"{current} C within {margin} C of {fail_at} C{suffix}")
    if "shutdown" in unreadable:
        return check("temperature", gpu, WARN, current, limits, f"{current} C, below {fail_at} C{suffix}")
    return check("temperature", gpu, OK, current, limits, f"{current} C{suffix}")


def check_clock_events(gpu: dict[str, Any], th: dict[str, Any]) -> dict:
    """Clock-event reasons: HW thermal / HW slowdown / power brake fail; SW thermal warns; the rest are benign."""
    del th
    limits = {"fail": decode_clock_events(CLOCK_EVENT_FAIL), "warn": decode_clock_events(CLOCK_EVENT_WARN)}
    miss = _not_value("clock_events", gpu, "clock_event_reasons", limits)
    if miss:
        return miss
    mask = int(gpu["values"]["clock_event_reasons"])
    names = decode_clock_events(mask)
    if mask & CLOCK_EVENT_FAIL:
        bad = decode_clock_events(mask & CLOCK_EVENT_FAIL)
        return check("clock_events", gpu, FAIL, names, limits,
                     f"clocks slowed by {', '.join(bad)}; check cooling and power")
    if mask & CLOCK_EVENT_WARN:
        return check("clock_events", gpu, WARN, names, limits, "clocks slowed by the driver's thermal limit")
    return check("clock_events", gpu, OK, names, limits, f"clock events: {', '.join(names) or 'none'}")


def check_processes(gpu: dict[str, Any], th: dict[str, Any]) -> dict:
    """Compute processes on a GPU that should be idle (``idle_expected``); allowed names pass (GCM running_procs)."""
    allowed = [str(n) for n in th["idle_allowed_processes"] or []]
    expect_idle = bool(th["idle_expected"])
    miss = _not_value("processes", gpu, "processes", "none" if expect_idle else None)
    if miss:
        return miss
    procs = gpu["values"]["processes"]
    foreign = [p for p in procs if p.get("name") not in allowed]
    value = [{"pid": p["pid"], "name": p.get("name"), "used_memory_mib": p.get("used_memory_mib")} for p in foreign]
    if not expect_idle:
        return check("processes", gpu, OK, value, None, f"{len(procs)} compute process(es); idle not expected")
    if foreign:
        listed = ", ".join(f"{p['pid']} ({p.get('name') or 'unknown'})" for p in foreign)
        return check("processes", gpu, FAIL, value, "none",
                     f"GPU expected idle but process(es) {listed} run on it")
    return check("processes", gpu, OK, value, "none", "no foreign compute process")


def mig_signature(layout: dict[str, Any]) -> dict[str, Any]:
    """Reduce a MIG layout to what must match: mode and sorted ``[profile, start, size, compute instances]``."""
    gis = []
    for gi in layout.get("gpu_instances") or []:
        cis = sorted(str(ci.get("profile_name") or ci.get("name") or ci.get("profile_id"))
                     for ci in gi.get("compute_instances") or [])
        gis.append([str(gi.get("profile_name") or gi.get("profile_id")), int(gi.get("start", 0)),
                    int(gi.get("size", 0)), cis])
    return {"enabled": bool(layout.get("enabled", layout.get("current"))), "gpu_instances": sorted(gis)}


def check_mig_layout(gpu: dict[str, Any], expected: dict[str, Any] | None) -> dict:
    """The GPU's MIG mode and instances equal those the nvidia_mig role recorded (when it recorded them)."""
    if expected is None:
        return check("mig_layout", gpu, OK, None, None, "no recorded MIG layout for this GPU; not checked")
    miss = _not_value("mig_layout", gpu, "mig", mig_signature(expected))
    if miss:
        return miss
    found, want = mig_signature(gpu["values"]["mig"]), mig_signature(expected)
    if found != want:
        return check("mig_layout", gpu, FAIL, found, want,
                     "the MIG layout differs from the one recorded by the nvidia_mig role; run "
                     "playbooks/mig_reconfigure.yml")
    return check("mig_layout", gpu, OK, found, want, "MIG layout as recorded")


def check_gpu(gpu: dict[str, Any], th: dict[str, Any], mig_expected: dict[str, Any] | None,
              kernel: dict[str, Any] | None = None) -> list[dict]:
    """Run every per-GPU check; a lost GPU gets one ``gpu_lost`` fail and nothing else."""
    if gpu.get("lost"):
        return [check("gpu_lost", gpu, FAIL, True, False,
                      "the GPU has fallen off the bus (NVML: GPU is lost); drain the node, reboot, and replace "
                      "the GPU if it recurs", action="reboot")]
    out = [check("gpu_lost", gpu, OK, False, False, "GPU reachable")]
    steps: list[tuple[tuple[str, ...], Any]] = [
        (("gpu_model",), lambda: check_gpu_model(gpu, th)),
        (("persistence_mode",), lambda: check_persistence(gpu, th)),
        (("ecc_mode",), lambda: check_ecc_mode(gpu, th)),
        (("ecc_uncorrected_volatile", "ecc_corrected_volatile"), lambda: check_ecc(gpu, th)),
        (("retired_pages",), lambda: check_retired_pages(gpu, th)),
        (("remapped_rows",), lambda: check_remapped_rows(gpu, th)),
        (("xid",), lambda: check_xid(gpu, th, kernel)),
        (("pcie_link_width", "pcie_link_gen"), lambda: check_pcie(gpu, th)),
        (("nvlink",), lambda: health_nvlink.check_nvlink(gpu, th)),
        (("fabric",), lambda: health_fabric.check_fabric(gpu, th)),
        (("temperature",), lambda: check_temperature(gpu, th)),
        (("clock_events",), lambda: check_clock_events(gpu, th)),
        (("processes",), lambda: check_processes(gpu, th)),
        (("mig_layout",), lambda: check_mig_layout(gpu, mig_expected)),
        (("recovery_action",), lambda: recovery.check_recovery_action(gpu)),
    ]
    for names, step in steps:
        out += _guarded(names, gpu, step)
    return out


def _guarded(names: tuple[str, ...], gpu: dict[str, Any] | None, step: Any) -> list[dict]:
    """Run one check; a reading it cannot make sense of fails its check(s) with the reason (fail closed)."""
    try:
        got = step()
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, OverflowError) as exc:
        reason = f"{type(exc).__name__}: {exc}"
        return [check(name, gpu, FAIL, None, None, f"could not evaluate {name}: malformed reading ({reason})",
                      level=UNKNOWN)
                for name in names]
    return got if isinstance(got, list) else [got]


def kernel_log_source(meas: dict[str, Any]) -> dict[str, Any] | None:
    """The kernel log's ``xid_sources`` entry (which source was read, or why none could be), or None (not asked)."""
    for source in meas.get("xid_sources") or []:
        if isinstance(source, dict) and source.get("source") == "kernel":
            return source
    return None


def evaluate_host(meas: dict[str, Any], th: dict[str, Any]) -> list[dict]:
    """Evaluate a whole measurement document; return every check, host-wide ones first."""
    if meas.get("init_error"):
        return [check("nvml", None, FAIL, None, "NVML initialised", meas["init_error"], level=UNKNOWN)]
    mig_doc = meas.get("mig_expected") or {}
    kernel = kernel_log_source(meas)
    if th.get("fabric_multinode_expected") is None:  # auto: IMEX configured, or a clique on the host
        fabrics = [g.get("values", {}).get("fabric") for g in meas.get("gpus", [])]
        th = dict(th, fabric_multinode_expected=bool(meas.get("imex_configured"))
                  or health_fabric.multinode([f for f in fabrics if isinstance(f, dict)]))
    out = _guarded(("gpu_count",), None, lambda: check_gpu_count(meas, th))
    out += _guarded(("driver_version",), None, lambda: check_driver_version(meas, th))
    out += _guarded(("fabric_manager",), None, lambda: check_fabric_manager(meas, th))
    out += _guarded(("vbios_consistency",), None, lambda: check_vbios_consistency(meas, th))
    for gpu in meas.get("gpus", []):
        out += check_gpu(gpu, th, mig_doc.get(str(gpu.get("uuid"))) if mig_doc else None, kernel)
    return out


def summarize(checks: list[dict]) -> dict[str, Any]:
    """Return ``{status, level, action, counts: {ok, warn, fail}, failed: [names with GPU index]}``."""
    counts = {OK: 0, WARN: 0, FAIL: 0}
    for item in checks:
        counts[item["status"]] += 1
    failed = [f"{c['name']}" + (f"[gpu {c['gpu']['index']}]" if c.get("gpu") else "")
              for c in checks if c["status"] == FAIL]
    return {"status": worst([c["status"] for c in checks]), "level": xid.worst_level([c["level"] for c in checks]),
            "action": xid.worst_action([c["action"] for c in checks]), "counts": counts, "failed": failed}
