"""``gpusim fidelity``: how closely the simulated NVML answers like a real driver, call by call.

A real getter dump (``nvml_getters_dump.py`` run on a real GPU machine, one JSON line per call: ``fn``, ``gpu``,
``args``, ``rc``, ``value``) is replayed against the simulator: the same tool runs on a host of a preset, through
the unmodified pynvml, with the library built for the dump's driver version. The two dumps are then compared call
by call:

- **return codes**: the same ``rc`` ("OK" or the NVML error name) for the same function, GPU and arguments;
- **static values**: for the calls both answer OK, the value, less what differs from machine to machine or moves
  while the machine runs (``MACHINE_SPECIFIC``, ``MOVING``, ``MOVING_FIELDS``: each entry says why).

Every disagreement has a stable id (``rc nvmlDeviceGetClock gpu0 [3, 1]``, ``value ... field 83``) so that an
allow-list file (one id a line, ``  # reason`` after it) can name the ones that remain, and a test can fail on a
new one and on an entry that no longer disagrees.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DUMP_TOOL = Path(__file__).with_name("nvml_getters_dump.py")

# Values that identify one machine: another board of the same model answers otherwise. None = the whole value,
# a tuple = those keys of a struct value.
MACHINE_SPECIFIC: dict[str, tuple[str, ...] | None] = {
    "nvmlDeviceGetUUID": None,
    "nvmlDeviceGetSerial": None,
    "nvmlDeviceGetPdi": None,                       # per-device identifier
    "nvmlDeviceGetIrqNum": None,                    # assigned by the host's kernel
    "nvmlDeviceGetBoardId": None,                   # per board in a system
    "nvmlDeviceGetModuleId": None,                  # the SXM slot the board sits in
    "nvmlDeviceGetPciInfo": ("busIdLegacy", "domain", "bus", "device", "busId"),
    "nvmlDeviceGetPciInfo_v3": ("busIdLegacy", "domain", "bus", "device", "busId"),
    "nvmlDeviceGetPciInfoExt": ("domain", "bus", "device", "busId"),
    "nvmlDeviceGetCpuAffinity": None,               # the host's CPUs
    "nvmlDeviceGetCpuAffinityWithinScope": None,
    "nvmlDeviceGetMemoryAffinity": None,            # the host's NUMA nodes
    "nvmlDeviceGetPlatformInfo": None,              # chassis, slot, tray of the machine
    "nvmlSystemGetHicVersion": None,                # the host's interface cards
}

# Readings that move while a machine runs (or count since it booted).
MOVING: dict[str, tuple[str, ...] | None] = {
    "nvmlDeviceGetTemperature": None,
    "nvmlDeviceGetTemperatureV": None,
    "nvmlDeviceGetTemperatureV1": None,
    "nvmlDeviceGetMarginTemperature": None,         # T.Limit: max operating minus the current temperature
    "nvmlDeviceGetThermalSettings": None,           # carries currentTemp
    "nvmlDeviceGetPowerUsage": None,
    "nvmlDeviceGetTotalEnergyConsumption": None,
    "nvmlDeviceGetClockInfo": None,                 # current clocks
    "nvmlDeviceGetClock": None,                     # [type, 0] is the current clock
    "nvmlDeviceGetCurrentClockFreqs": None,
    "nvmlDeviceGetPerformanceModes": None,          # the current clocks in a string
    "nvmlDeviceGetUtilizationRates": None,
    "nvmlDeviceGetEncoderUtilization": None,
    "nvmlDeviceGetDecoderUtilization": None,
    "nvmlDeviceGetJpgUtilization": None,
    "nvmlDeviceGetOfaUtilization": None,
    "nvmlDeviceGetDynamicPstatesInfo": None,        # utilization percentages
    "nvmlDeviceGetPcieThroughput": None,
    "nvmlDeviceGetPcieReplayCounter": None,         # counts since boot
    "nvmlDeviceGetMemoryInfo": ("free", "used"),
    "nvmlDeviceGetMemoryInfo_v2": ("free", "used"),
    "nvmlDeviceGetBAR1MemoryInfo": ("bar1Free", "bar1Used"),
    "nvmlDeviceGetSamples": None,                   # timestamps and readings
    "nvmlDeviceGetViolationStatus": None,           # reference time and accumulated time
    "nvmlDeviceGetConfComputeMemSizeInfo": None,    # follows the memory the driver has reserved
}

# Field values (nvmlDeviceGetFieldValues) whose value moves: compared by return code only. Matched on the
# NVML_FI_DEV_* name pynvml gives the id.
MOVING_FIELDS = ("TEMP", "POWER_AVERAGE", "POWER_INSTANT", "ENERGY", "PCIE_COUNT", "L0_TO_RECOVERY", "PERF_POLICY",
                 "REPLAY", "THROUGHPUT")
FIELD_DROP = ("timestamp", "latencyUsec", "scopeId")

NVLINK_WORDS = ("NvLink", "Nvlink", "Topology", "P2PStatus")


@dataclass
class Report:
    """The comparison of a real dump with the simulator's."""

    real_path: str
    preset: str
    driver: str
    scope: str
    calls: int = 0
    rc_agree: int = 0
    real_ok_sim_not: int = 0
    sim_ok_real_not: int = 0
    both_fail_differently: int = 0
    both_ok: int = 0
    values_compared: int = 0
    values_agree: int = 0
    values_excluded: int = 0
    disagreements: dict[str, str] = field(default_factory=dict)   # id -> detail

    def rc_percent(self) -> float:
        return 100.0 * self.rc_agree / self.calls if self.calls else 0.0

    def summary(self) -> list[str]:
        return [
            f"real: {self.real_path} (driver {self.driver}); simulator: preset {self.preset}, "
            f"library built for {self.driver}; calls: {self.scope}",
            f"return codes agree: {self.rc_agree}/{self.calls} ({self.rc_percent():.1f}%)"
            f"  [real OK, simulator not: {self.real_ok_sim_not}; simulator OK, real not: {self.sim_ok_real_not}; "
            f"both fail differently: {self.both_fail_differently}]",
            f"static values agree: {self.values_agree}/{self.values_compared} of the {self.both_ok} calls both "
            f"answer OK ({self.values_excluded} machine-specific or moving, not compared)",
            "inferred (seen on no real GPU): {library} marks in the library's sources, {models} notes in the model "
            "files".format(**inferred_count()),
        ]


def inferred_count() -> dict[str, int]:
    """How many simulated facts no real transcript shows: the INFERRED marks in the library's sources and the
    "inferred" notes in the model files (STYLE.md: the fidelity report counts them)."""
    package = Path(__file__).parent
    native = sum(path.read_text(encoding="utf-8").count("INFERRED") for path in (package / "native").glob("*.c"))
    models = sum(path.read_text(encoding="utf-8").lower().count("inferred")
                 for path in (package / "models").glob("*.json"))
    return {"library": native, "models": models}


def load_dump(path: Path) -> list[dict[str, Any]]:
    """The call records of a dump (without the ``nvmlInit`` and ``total`` lines)."""
    records = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if line.strip():
            rec = json.loads(line)
            if rec.get("fn") not in ("nvmlInit", "total"):
                records.append(rec)
    return records


def call_id(rec: dict[str, Any]) -> str:
    gpu = "" if rec.get("gpu") is None else f" gpu{rec['gpu']}"
    return f"{rec['fn']}{gpu} {json.dumps(rec.get('args', []))}"


def dump_driver(records: list[dict[str, Any]]) -> str:
    for rec in records:
        if rec["fn"] == "nvmlSystemGetDriverVersion" and rec.get("rc") == "OK":
            return str(rec["value"])
    raise ValueError("the dump has no nvmlSystemGetDriverVersion answer: which driver made it?")


def run_simulated_dump(preset: str, driver: str, *, seed: str = "fidelity", build_dir: Path | None = None,
                       lib: Path | None = None, python: str = sys.executable) -> list[dict[str, Any]]:
    """Run the getter dump on a fresh host of ``preset`` against the library built for ``driver``."""
    from .build import build_library
    from .presets import build_state

    if lib is None:
        lib = build_library((build_dir or Path("build")) / f"fidelity-{driver}", driver, python=python)
    with tempfile.TemporaryDirectory(prefix="gpusim-fidelity-") as tmp:
        state = Path(tmp) / "state.json"
        state.write_text(json.dumps(build_state(preset, seed)), encoding="utf-8")
        env = {k: v for k, v in os.environ.items() if k not in ("NVML_SIM_STATE", "LD_LIBRARY_PATH")}
        env.update({"NVML_SIM_STATE": str(state), "LD_LIBRARY_PATH": str(Path(lib).parent), "LC_ALL": "C"})
        out = Path(tmp) / "dump.jsonl"
        with out.open("w", encoding="utf-8") as sink:
            proc = subprocess.run([python, str(DUMP_TOOL)], stdout=sink, stderr=subprocess.PIPE, text=True,
                                  env=env, check=False, timeout=600)
        if proc.returncode != 0:
            raise RuntimeError(f"the getter dump failed on the simulator (exit {proc.returncode}):\n{proc.stderr}")
        return load_dump(out)


def _field_names() -> dict[int, str]:
    import pynvml

    names: dict[int, str] = {}
    for key in sorted(dir(pynvml)):
        value = getattr(pynvml, key)
        if key.startswith("NVML_FI_") and isinstance(value, int):
            names.setdefault(value, key)
    return names


def _strip(value: Any, drop: tuple[str, ...]) -> Any:
    if isinstance(value, dict):
        return {k: v for k, v in value.items() if k not in drop}
    return value


def _diff(real: Any, sim: Any, path: str = "") -> list[str]:
    if isinstance(real, dict) and isinstance(sim, dict):
        out = []
        for key in real:
            out += _diff(real[key], sim.get(key, "<missing>"), f"{path}.{key}" if path else key)
        return out
    if isinstance(real, list) and isinstance(sim, list) and len(real) == len(sim):
        out = []
        for i, (a, b) in enumerate(zip(real, sim, strict=True)):
            out += _diff(a, b, f"{path}[{i}]")
        return out
    if real != sim:
        return [f"{path or 'value'}: real {json.dumps(real)}, simulator {json.dumps(sim)}"]
    return []


def _field_value(entry: dict[str, Any]) -> Any:
    """A field value's reading in the member its valueType names (the union's other members are noise)."""
    member = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}.get(
        int(entry.get("valueType", 3)), "ullVal")
    return (entry.get("valueType"), entry.get("value", {}).get(member))


def _compare_fields(report: Report, cid: str, real: list[dict[str, Any]], sim: list[dict[str, Any]]) -> None:
    names = _field_names()
    by_id = {e["fieldId"]: e for e in sim}
    for entry in real:
        fid = entry["fieldId"]
        other = by_id.get(fid)
        key = f"value {cid} field {fid}"
        name = names.get(fid, "?")
        if other is None:
            report.disagreements[key] = f"{name}: the simulator did not answer it"
        elif entry["nvmlReturn"] != other["nvmlReturn"]:
            report.disagreements[key] = f"{name}: real return {entry['nvmlReturn']}, simulator {other['nvmlReturn']}"
        elif entry["nvmlReturn"] == 0 and not any(w in name for w in MOVING_FIELDS) \
                and _field_value(entry) != _field_value(other):
            report.disagreements[key] = (f"{name}: real (type, value) {_field_value(entry)}, "
                                         f"simulator {_field_value(other)}")


def compare(real: list[dict[str, Any]], sim: list[dict[str, Any]], *, real_path: str = "", preset: str = "",
            without_nvlink: bool = False) -> Report:
    """Compare a real dump with the simulator's, call by call."""
    report = Report(real_path, preset, dump_driver(real),
                    "without NVLink and topology calls" if without_nvlink else "all")
    sim_by_id = {call_id(r): r for r in sim}
    for rec in real:
        if without_nvlink and any(w in rec["fn"] for w in NVLINK_WORDS):
            continue
        cid = call_id(rec)
        other = sim_by_id.get(cid, {"rc": "MISSING"})
        report.calls += 1
        real_rc, sim_rc = rec.get("rc"), other.get("rc")
        if real_rc != sim_rc:
            if real_rc == "OK":
                report.real_ok_sim_not += 1
            elif sim_rc == "OK":
                report.sim_ok_real_not += 1
            else:
                report.both_fail_differently += 1
            report.disagreements[f"rc {cid}"] = f"real {real_rc}, simulator {sim_rc}"
            continue
        report.rc_agree += 1
        if real_rc != "OK":
            continue
        report.both_ok += 1
        fn = rec["fn"]
        rule = MACHINE_SPECIFIC.get(fn, MOVING.get(fn, ()))
        if rule is None:
            report.values_excluded += 1
            continue
        report.values_compared += 1
        if fn == "nvmlDeviceGetFieldValues":
            before = len(report.disagreements)
            _compare_fields(report, cid, rec["value"], other["value"])
            report.values_agree += len(report.disagreements) == before
            continue
        diffs = _diff(_strip(rec.get("value"), rule), _strip(other.get("value"), rule))
        if diffs:
            report.disagreements[f"value {cid}"] = "; ".join(diffs)
        else:
            report.values_agree += 1
    return report


def read_allow_list(path: Path) -> dict[str, str]:
    """An allow-list: ``<disagreement id>  # reason`` a line; blank lines and ``#`` lines are comments."""
    allowed: dict[str, str] = {}
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, _, reason = line.partition("  #")
        allowed[key.strip()] = reason.strip()
    return allowed


def check_allow_list(report: Report, allowed: dict[str, str]) -> tuple[list[str], list[str], list[str]]:
    """(new disagreements, allow-list entries that no longer disagree, entries without a reason)."""
    new = sorted(k for k in report.disagreements if k not in allowed)
    stale = sorted(k for k in allowed if k not in report.disagreements)
    bare = sorted(k for k, reason in allowed.items() if not reason)
    return new, stale, bare


def main(getters: Path, preset: str, *, without_nvlink: bool = False, allow: Path | None = None,
         lib: Path | None = None, build_dir: Path | None = None) -> int:
    """``gpusim fidelity``: print the summary and every disagreement; exit 1 when an allow-list is not met."""
    real = load_dump(getters)
    sim = run_simulated_dump(preset, dump_driver(real), build_dir=build_dir, lib=lib)
    report = compare(real, sim, real_path=str(getters), preset=preset, without_nvlink=without_nvlink)
    print("\n".join(report.summary()))
    allowed = read_allow_list(allow) if allow else {}
    print(f"disagreements: {len(report.disagreements)}" + (f" ({len(allowed)} in the allow-list)" if allow else ""))
    for key in sorted(report.disagreements):
        mark = "  (allowed)" if key in allowed else ""
        print(f"  {key}: {report.disagreements[key]}{mark}")
    if not allow:
        return 0
    new, stale, bare = check_allow_list(report, allowed)
    for key in new:
        print(f"NEW (not in {allow}): {key}")
    for key in stale:
        print(f"STALE (agrees now; remove it from {allow}): {key}")
    for key in bare:
        print(f"NO REASON in {allow}: {key}")
    return 1 if new or stale or bare else 0
