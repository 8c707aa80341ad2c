# Copyright: gpufleet contributors
# SPDX-License-Identifier: Apache-2.0 (see LICENSE)
"""Apply a MIG layout on the local host: read NVML, plan (``mig_planner``), refuse busy GPUs, act, verify.

Shared by the ``gpufleet.nvidia.nvidia_mig`` module and the boot-time re-apply entry point that the
``nvidia_mig`` role installs (``gpufleet-mig-apply``), so both do exactly the same thing. Nothing here depends
on Ansible: external commands (the GPU reset) go through a ``run(argv) -> (rc, stdout, stderr)`` callable.

Order of work:

1. every busy check, before any change on any GPU (a refused run leaves every GPU as it was);
2. MIG mode changes, GPU by GPU (instances of GPUs leaving MIG mode are destroyed first, as NVML requires);
3. one ``nvidia-smi -r -i <bus ids>`` for the GPUs whose mode change waits for a reset (when allowed);
4. GPU by GPU, those that only gain instances first: the instances the layout does not keep are destroyed,
   then at once the new GPU instances are created at explicit placements, each followed by its compute
   instances at the validator's CI placements; at most one GPU at a time is short of its old and new layout;
5. the state is read back and planned again per GPU.

A GPU that cannot be read, or whose NVML call fails, is isolated: the others go on, then the run fails naming
it, with ``gpu_status`` per GPU. Callers hold :func:`host_lock` so that writers never interleave.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from ansible_collections.gpufleet.nvidia.plugins.module_utils.mig_layout import LayoutError, validate
from ansible_collections.gpufleet.nvidia.plugins.module_utils.mig_parted import MigPartedError, from_mig_parted
from ansible_collections.gpufleet.nvidia.plugins.module_utils.mig_planner import GpuPlan, plan, summarize
from ansible_collections.gpufleet.nvidia.plugins.module_utils.mig_profiles import parse_profile_name
from ansible_collections.gpufleet.nvidia.plugins.module_utils.mig_read import (  # noqa: F401 (re-exported)
    achieved,
    describe_gpu,
    diff_of,
    read_gpu,
    read_gpus_isolated,
    read_host,
)
from ansible_collections.gpufleet.nvidia.plugins.module_utils.nvml import ERROR_GPU_IS_LOST, Nvml, NvmlError

Runner = Callable[[list[str]], tuple[int, str, str]]
DESTROY_ACTIONS = ("destroy_ci", "destroy_gi")
CREATE_ACTIONS = ("create_gi", "create_ci")
DEFAULT_LOCK = "/run/gpufleet/mig.lock"
DEFAULT_LOCK_TIMEOUT = 300.0


class MigApplyError(Exception):
    """Applying the layout failed; ``partial`` holds what is known so far (actions done, state after)."""

    def __init__(self, message: str, partial: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.partial: dict[str, Any] = dict(partial or {})


class InvalidLayout(MigApplyError):
    """The layout does not fit the host's GPUs (the validator's message)."""


class BusyError(MigApplyError):
    """Processes run where the plan must destroy instances or change the MIG mode; nothing was changed."""


class ResetError(MigApplyError):
    """The GPU reset that a MIG mode change needs was refused."""


class VerifyError(MigApplyError):
    """After applying, the GPUs do not show the desired layout."""


class LockBusy(MigApplyError):
    """Another gpufleet run holds the host's MIG lock; nothing was changed."""


# --------------------------------------------------------------------------------------------------- planning
def resolve_layout(layout: Any = None, mig_parted_config: Any = None, selected: str | None = None) -> list[Any]:
    """The layout entries to validate: ``layout`` itself, or the ``selected`` label of a mig-parted config."""
    if (layout is None) == (mig_parted_config is None):
        raise InvalidLayout("give exactly one of layout or mig_parted_config")
    if layout is not None:
        return list(layout) if isinstance(layout, (list, tuple)) else layout
    try:
        entries = from_mig_parted(mig_parted_config, selected)
    except MigPartedError as exc:
        raise InvalidLayout(str(exc)) from exc
    if isinstance(entries, dict):
        if len(entries) != 1:
            raise InvalidLayout("the mig-parted config has {} labels ({}); choose one with selected".format(
                len(entries), ", ".join(entries)))
        entries = next(iter(entries.values()))
    return entries


def desired_for(entries: Any, gpus: Sequence[Mapping[str, Any]], indexes: Sequence[int] | None) -> list[Any]:
    """Validate ``entries`` against every GPU of the host; keep the configs of ``indexes`` (all when None)."""
    try:
        configs = validate(entries, gpus)
    except LayoutError as exc:
        raise InvalidLayout(str(exc)) from exc
    return [c for c in configs if indexes is None or c.index in indexes]


def find_busy(plans: Sequence[GpuPlan], gpus: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """GPUs where the plan would disturb running processes: ``[{gpu, uuid, pids, reason}]``.

    A process blocks a MIG mode change (and the GPU reset it may need) anywhere on its GPU, and the destruction
    of the GPU or compute instance it runs in. A process not tied to an instance blocks every destruction on
    its GPU."""
    by_index = {int(g["index"]): g for g in gpus}
    busy = []
    for gpu_plan in plans:
        gpu = by_index[gpu_plan.index]
        procs = gpu.get("processes") or []
        if not procs or not gpu_plan.actions:
            continue
        kinds = {a["action"] for a in gpu_plan.actions}
        gis = {a["gi_id"] for a in gpu_plan.actions if a["action"] == "destroy_gi"}
        cis = {(a["gi_id"], a["ci_id"]) for a in gpu_plan.actions if a["action"] == "destroy_ci"}
        if "set_mig_mode" in kinds:
            hit, reason = procs, "a MIG mode change needs the whole GPU idle"
        else:
            hit = [p for p in procs
                   if (p.get("gi_id") is None and gis | cis) or p.get("gi_id") in gis
                   or (p.get("gi_id"), p.get("ci_id")) in cis]
            reason = "they run on MIG instances that the layout removes"
        if hit:
            busy.append({"gpu": gpu_plan.index, "uuid": gpu.get("uuid"), "reason": reason,
                         "pids": sorted(int(p["pid"]) for p in hit),
                         "processes": [dict(p) for p in hit]})
    return busy


def busy_message(busy: Sequence[Mapping[str, Any]]) -> str:
    """One actionable sentence naming every GPU and PID."""
    parts = []
    for item in busy:
        names = ", ".join("{}{}".format(p["pid"], f" ({p['name']})" if p.get("name") else "")
                          for p in item["processes"])
        parts.append("GPU {} ({}): PIDs {}".format(item["gpu"], item["reason"], names))
    return ("refusing to change MIG while processes use the GPUs, nothing was changed: " + "; ".join(parts)
            + "; drain the workloads (or set force_destroy_busy: true) and retry")


def _needs_mode_change(gpu: Mapping[str, Any], action: Mapping[str, Any]) -> bool:
    return int(gpu["mig"]["pending"]) != int(action["mode"])


# --------------------------------------------------------------------------------------------------- lock
@contextlib.contextmanager
def host_lock(path: str = DEFAULT_LOCK, timeout: float = DEFAULT_LOCK_TIMEOUT, holder: str = "gpufleet"
              ) -> Iterator[None]:
    """Hold the host's MIG lock (``fcntl.flock`` on ``path``) for the ``with`` body.

    Every gpufleet writer of MIG state takes it: the ``nvidia_mig`` module, the boot-time unit and the role's
    host-side transaction. A second writer waits up to ``timeout`` seconds, then raises :class:`LockBusy` naming
    the holder (the pid and what it is, which the holder writes into the file). The kernel drops the lock when
    the holder dies, so a killed run never leaves it behind."""
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, mode=0o755, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    deadline = time.monotonic() + max(0.0, float(timeout))
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    who = os.pread(fd, 512, 0).decode("utf-8", "replace").strip() or "a process that wrote no name"
                    message = (f"another gpufleet MIG run holds the host lock {path} ({who}); waited {timeout:g} s "
                               "and changed nothing; let it finish, or raise lock_timeout")
                    raise LockBusy(message, {"changed": False}) from None
                time.sleep(0.2)
        os.ftruncate(fd, 0)
        os.pwrite(fd, "pid {} ({}) since {}\n".format(
            os.getpid(), holder, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())).encode("utf-8"), 0)
        try:
            yield
        finally:
            os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


# --------------------------------------------------------------------------------------------------- acting
def _failure_text(exc: BaseException) -> str:
    return " ".join(str(exc).split())


class _Applier:
    """Executes the planned actions GPU by GPU, recording what was done and which GPUs failed.

    A failing NVML call stops the work on its GPU only (``failed``); the other GPUs go on. GPUs are changed one
    at a time, each one's destroys immediately followed by its creates, GPUs that only gain instances first: at
    any moment at most one GPU is short of both its old and its new layout."""

    def __init__(self, nvml: Nvml, run: Runner, smi: str, allow_reset: bool) -> None:
        self.nvml = nvml
        self.run = run
        self.smi = smi
        self.allow_reset = allow_reset
        self.done: list[dict[str, Any]] = []
        self.awaiting_reset: list[int] = []
        self.reset: list[int] = []
        self.failed: dict[int, BaseException] = {}
        self.touched: set[int] = set()

    def _do(self, action: Mapping[str, Any], new_gis: dict[tuple[int, str, int], int]) -> None:
        nvml, index, kind = self.nvml, int(action["gpu"]), action["action"]
        record = dict(action)
        self.touched.add(index)
        if kind == "destroy_ci":
            nvml.destroy_compute_instance(index, int(action["gi_id"]), int(action["ci_id"]))
        elif kind == "destroy_gi":
            nvml.destroy_gpu_instance(index, int(action["gi_id"]))
        elif kind == "create_gi":
            made = nvml.create_gpu_instance(index, int(action["profile_id"]), int(action["start"]))
            new_gis[(index, str(action["profile"]), int(action["start"]))] = made["id"]
            record["gi_id"] = made["id"]
        elif kind == "create_ci":
            gi_id = action.get("gi_id")
            if gi_id is None:
                gi_id = new_gis[(index, str(action["gi_profile"]), int(action["gi_start"]))]
            slices = parse_profile_name(str(action["profile"])).compute_slices
            start = action.get("start")
            # The validator's CI placement goes to NVML (nvmlGpuInstanceCreateComputeInstanceWithPlacement).
            made = nvml.create_compute_instance(index, int(gi_id), slices, None if start is None else int(start))
            record.update(gi_id=gi_id, ci_id=made["id"])
        elif kind == "set_mig_mode":
            result = nvml.set_mig_mode(index, bool(action["mode"]))
            record.update(activation_status=result["activation_status"])
            if result["current"] != result["pending"]:
                self.awaiting_reset.append(index)
        else:
            raise MigApplyError(f"unknown planned action {kind!r}")
        self.done.append(record)

    def _steps(self, index: int, actions: Sequence[Mapping[str, Any]],
               new_gis: dict[tuple[int, str, int], int]) -> bool:
        """Run ``actions`` of GPU ``index``; on an NVML failure record it and stop this GPU. True when all ran."""
        try:
            for action in actions:
                self._do(action, new_gis)
        except NvmlError as exc:
            self.failed[index] = exc
            return False
        return True

    def apply(self, plans: Sequence[GpuPlan], gpus: Sequence[Mapping[str, Any]]) -> None:
        by_index = {int(g["index"]): g for g in gpus}
        new_gis: dict[tuple[int, str, int], int] = {}
        rest: dict[int, list[dict[str, Any]]] = {}
        for gpu_plan in plans:  # 1. mode changes (with the destroys NVML requires before them), GPU by GPU
            actions = list(gpu_plan.actions)
            mode_at = next((i for i, a in enumerate(actions) if a["action"] == "set_mig_mode"), None)
            if mode_at is None:
                rest[gpu_plan.index] = actions
                continue
            gpu = by_index[gpu_plan.index]
            before = list(actions[:mode_at])
            if _needs_mode_change(gpu, actions[mode_at]):
                before.append(actions[mode_at])
            elif int(gpu["mig"]["current"]) != int(gpu["mig"]["pending"]):
                self.awaiting_reset.append(gpu_plan.index)  # set earlier, still waiting for a reset
            if self._steps(gpu_plan.index, before, new_gis):
                rest[gpu_plan.index] = actions[mode_at + 1:]
        if self.awaiting_reset and self.allow_reset:  # 2. one reset for every GPU that waits for one
            waiting = sorted(i for i in self.awaiting_reset if i not in self.failed)
            try:
                self._reset(waiting, by_index)
            except ResetError as exc:
                for index in waiting:
                    self.failed[index] = exc
        # 3. GPU by GPU: its destroys, then at once its creates; GPUs that lose nothing first.
        order = sorted(rest, key=lambda i: (any(a["action"] in DESTROY_ACTIONS for a in rest[i]), i))
        for index in order:
            if index in self.awaiting_reset or index in self.failed:
                continue
            actions = rest[index]
            self._steps(index, [a for a in actions if a["action"] in DESTROY_ACTIONS]
                        + [a for a in actions if a["action"] in CREATE_ACTIONS], new_gis)

    def _reset(self, indexes: list[int], by_index: Mapping[int, Mapping[str, Any]]) -> None:
        if not indexes:
            return
        bus_ids = [str(by_index[i]["pci_bus_id"]) for i in indexes]
        argv = [self.smi, "-r", "-i", ",".join(bus_ids)]
        self.touched.update(indexes)
        rc, out, err = self.run(argv)
        if rc != 0:
            detail = " ".join((err or out).split()) or "no output"
            raise ResetError("GPU reset for the MIG mode change of GPUs {} was refused ({} exited {}: {}); stop the "
                             "services and processes that hold the GPUs (nvidia-persistenced, DCGM, MPS, the "
                             "Kubernetes device plugin; unload nvidia_drm), or set allow_reset: false and reboot"
                             .format(", ".join(str(i) for i in indexes), " ".join(argv), rc, detail))
        self.done.append({"action": "reset", "gpus": indexes, "pci_bus_ids": bus_ids})
        for index in indexes:
            mode = self.nvml.mig_mode(index)
            if mode is None or mode[0] != mode[1]:
                raise ResetError(f"GPU {index} was reset but its MIG mode change is still pending; reboot the host")
        self.reset = indexes
        self.awaiting_reset = [i for i in self.awaiting_reset if i not in indexes]


# --------------------------------------------------------------------------------------------------- verify
def verify(plans_after: Sequence[GpuPlan], awaiting_reset: Sequence[int], gpus: Sequence[Mapping[str, Any]]
           ) -> list[str]:
    """Problems left after applying: a GPU that still needs actions (GPUs that wait for a reset only need
    their pending mode right and, when leaving MIG mode, no instances)."""
    by_index = {int(g["index"]): g for g in gpus}
    problems = []
    for gpu_plan in plans_after:
        actions = gpu_plan.actions
        if gpu_plan.index in awaiting_reset:
            gpu = by_index[gpu_plan.index]
            mode = next((a for a in actions if a["action"] == "set_mig_mode"), None)
            wrong_mode = mode is not None and _needs_mode_change(gpu, mode)
            leftovers = [a for a in actions if a["action"] in DESTROY_ACTIONS]
            if wrong_mode or leftovers:
                problems.append(summarize([gpu_plan]))
        elif actions:
            problems.append(summarize([gpu_plan]))
    return problems


# --------------------------------------------------------------------------------------------------- converge
def predict(plans: Sequence[GpuPlan], gpus: Sequence[Mapping[str, Any]], allow_reset: bool
            ) -> tuple[list[int], list[int]]:
    """``(GPUs that would change, GPUs that would wait for a reset)`` for check mode, from the plan alone."""
    by_index = {int(g["index"]): g for g in gpus}
    changed, waiting = [], []
    for gpu_plan in plans:
        gpu, actions = by_index[gpu_plan.index], gpu_plan.actions
        mode_at = next((i for i, a in enumerate(actions) if a["action"] == "set_mig_mode"), None)
        if mode_at is None:
            if actions:
                changed.append(gpu_plan.index)
            continue
        sets = _needs_mode_change(gpu, actions[mode_at])
        awaits = bool(actions[mode_at].get("reset_required")) if sets else (
            int(gpu["mig"]["current"]) != int(gpu["mig"]["pending"]))
        if awaits and not allow_reset:
            waiting.append(gpu_plan.index)
            if sets or mode_at > 0:
                changed.append(gpu_plan.index)
        elif sets or awaits or len(actions) > 1:
            changed.append(gpu_plan.index)
    return changed, waiting


def simulate(gpu: Mapping[str, Any], actions: Sequence[Mapping[str, Any]], reset: bool) -> dict[str, Any]:
    """The GPU as it would be after ``actions`` (for the check-mode diff); ``reset``: a pending mode change is
    applied by a GPU reset, else it stays pending and the GPU's instance creations wait."""
    after = {**gpu, "mig": dict(gpu["mig"]), "gpu_instances": [dict(gi, compute_instances=list(gi["compute_instances"]))
                                                               for gi in gpu["gpu_instances"]]}
    mig, gis = after["mig"], after["gpu_instances"]
    for action in actions:
        kind = action["action"]
        if kind == "set_mig_mode":
            mig["pending"] = bool(action["mode"])
            if reset or not action.get("reset_required"):
                mig["current"] = mig["pending"]
        elif kind == "destroy_gi":
            gis[:] = [gi for gi in gis if gi["id"] != action["gi_id"]]
        elif kind == "destroy_ci":
            for gi in gis:
                if gi["id"] == action["gi_id"]:
                    gi["compute_instances"] = [ci for ci in gi["compute_instances"] if ci["id"] != action["ci_id"]]
        elif not mig["current"]:
            continue  # creations wait for the reset
        elif kind == "create_gi":
            gis.append({"id": None, "profile": action["profile"], "start": action["start"], "size": action["size"],
                        "compute_instances": []})
        elif kind == "create_ci":
            for gi in gis:
                same = gi["id"] == action["gi_id"] if action.get("gi_id") is not None else (
                    gi["id"] is None and gi["profile"] == action["gi_profile"] and gi["start"] == action["gi_start"])
                if same:
                    gi["compute_instances"].append({"id": None, "profile": action["profile"], "uuid": None})
    gis.sort(key=lambda gi: gi["start"])
    return after


def _flat(plans: Sequence[GpuPlan]) -> list[dict[str, Any]]:
    return [dict(a) for p in plans for a in p.actions]


def check_indexes(indexes: Any, count: int) -> list[int] | None:
    """``gpus`` as a list of distinct indexes of this host's ``count`` GPUs; :class:`InvalidLayout` otherwise."""
    if indexes is None:
        return None
    have = f"GPUs 0-{count - 1}" if count else "no GPU"
    if not isinstance(indexes, (list, tuple)):
        raise InvalidLayout(f"gpus must be a list of GPU indexes, got {indexes!r}; this host has {have}")
    if not indexes:  # never "already applied": an empty selection manages nothing (issue 32)
        raise InvalidLayout(f"gpus is an empty list: it selects no GPU, so nothing would be applied; leave gpus "
                            f"unset for every GPU, or list the ones to manage (this host has {have})")
    seen: list[int] = []
    for value in indexes:
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidLayout(f"gpus: {value!r} is not a GPU index; list integers (this host has {have})")
        if not 0 <= value < count:
            raise InvalidLayout(f"gpus: GPU {value} is not on this host (it has {have}); list only its GPUs")
        if value in seen:
            raise InvalidLayout(f"gpus: GPU {value} is listed twice; list each GPU once")
        seen.append(value)
    return seen


def _is_lost(exc: BaseException) -> bool:
    return isinstance(exc, NvmlError) and exc.code == ERROR_GPU_IS_LOST


def gpu_statuses(managed: Sequence[int], touched: set[int], failed: Mapping[int, BaseException],
                 awaiting_reset: Sequence[int]) -> list[dict[str, Any]]:
    """Per managed GPU: ``{index, status: done | failed | untouched, lost, reboot_required, error}``."""
    result = []
    for index in managed:
        exc = failed.get(index)
        status = "failed" if exc is not None else "done" if index in touched else "untouched"
        result.append({"index": index, "status": status, "lost": exc is not None and _is_lost(exc),
                       "reboot_required": index in awaiting_reset,
                       "error": None if exc is None else _failure_text(exc)})
    return result


def _ranges(indexes: Sequence[int]) -> str:
    return ", ".join(str(i) for i in indexes) or "none"


def failure_message(statuses: Sequence[Mapping[str, Any]]) -> str:
    """One line: every distinct failure, then which GPUs are done, failed (lost) and untouched."""
    errors: list[str] = []
    for item in statuses:
        if item["error"] and item["error"] not in errors:
            errors.append(item["error"])
    def pick(status: str) -> list[int]:
        return [int(i["index"]) for i in statuses if i["status"] == status]
    lost = [int(i["index"]) for i in statuses if i["lost"]]
    return "{} (GPUs done: {}; failed: {}{}; untouched: {}; the failed GPUs are left as the failure found them, " \
           "the others are in their new or old layout; fix the cause and run again)".format(
               " | ".join(errors), _ranges(pick("done")), _ranges(pick("failed")),
               f", lost: {_ranges(lost)}" if lost else "", _ranges(pick("untouched")))


def converge(nvml: Nvml, entries: Any, indexes: Sequence[int] | None = None, allow_reset: bool = True,
             force_destroy_busy: bool = False, check_mode: bool = False, run: Runner | None = None,
             smi: str = "nvidia-smi") -> dict[str, Any]:
    """Bring the host's GPUs to the layout ``entries``; return the result (see the module's RETURN).

    A GPU that cannot be read (lost) or whose change fails is isolated: the other managed GPUs are still
    brought to the layout, then the run fails naming it (``gpu_status`` says per GPU done / failed / untouched).

    Raises:
        InvalidLayout: the layout or ``indexes`` do not fit these GPUs (nothing changed).
        BusyError: processes would be disturbed and ``force_destroy_busy`` is false (nothing changed).
        ResetError, VerifyError, MigApplyError: a GPU failed (``partial`` has the result with ``gpu_status``).
    """
    count = nvml.device_count()
    wanted = check_indexes(indexes, count)
    gpus, unreadable = read_gpus_isolated(nvml, range(count))
    try:
        configs = validate(entries, gpus, absent=sorted(unreadable))
    except LayoutError as exc:
        raise InvalidLayout(str(exc)) from exc
    desired = [c for c in configs if wanted is None or c.index in wanted]
    managed_indexes = list(range(count)) if wanted is None else sorted(wanted)
    managed = [g for g in gpus if g["index"] in managed_indexes]
    lost = {i: exc for i, exc in unreadable.items() if i in managed_indexes}
    try:
        plans = plan(managed, desired)
    except LayoutError as exc:
        raise InvalidLayout(str(exc)) from exc
    result: dict[str, Any] = {
        "plan": [p.to_dict() for p in plans], "plan_summary": summarize(plans),
        "desired": [c.to_dict() for c in desired],
        "busy": find_busy(plans, managed), "warnings": [], "profile_names": profile_names(desired),
    }
    if result["busy"]:
        if not force_destroy_busy:
            raise BusyError(busy_message(result["busy"]), dict(result, changed=False, actions=[],
                                                               layout=achieved(managed)))
        result["warnings"].append(busy_message(result["busy"]).replace("refusing", "force_destroy_busy: going on",
                                                                       1))
    if check_mode:
        changed, waiting = predict(plans, managed, allow_reset)
        by_index = {p.index: p.actions for p in plans}
        predicted = [simulate(g, by_index.get(g["index"], []), allow_reset) for g in managed]
        checked = dict(result, changed=bool(changed), changed_gpus=changed, actions=_flat(plans),
                       reboot_required=bool(waiting), reboot_required_gpus=waiting, reset_gpus=[],
                       layout=achieved(managed), diff=diff_of(managed, predicted),
                       gpu_status=gpu_statuses(managed_indexes, set(), lost, waiting),
                       msg=_message(changed, waiting, check_mode=True) + _names_note(result["profile_names"]))
        if lost:  # fail closed: a GPU that cannot be read cannot be planned
            raise MigApplyError(failure_message(checked["gpu_status"]), checked)
        return checked
    if run is None:
        raise MigApplyError("no command runner given for the GPU reset")
    applier = _Applier(nvml, run, smi, allow_reset)
    applier.failed.update(lost)
    try:
        applier.apply(plans, managed)
    except MigApplyError as exc:  # an unknown action: a bug, not a GPU fault
        raise MigApplyError(str(exc), dict(result, changed=bool(applier.done), actions=applier.done)) from exc
    readable = [i for i in managed_indexes if not (i in applier.failed and _is_lost(applier.failed[i]))]
    after, gone = read_gpus_isolated(nvml, readable, processes=False)
    applier.failed.update(gone)
    after_ok = [g for g in after if g["index"] not in applier.failed]
    for gpu_plan in plan(after_ok, [c for c in desired if c.index in {g["index"] for g in after_ok}]):
        problems = verify([gpu_plan], applier.awaiting_reset, after_ok)
        if problems:
            applier.failed[gpu_plan.index] = VerifyError(
                "GPU {} does not show the layout after applying it: {}".format(
                    gpu_plan.index, " ".join(" ".join(problems).split())))
    changed = sorted({int(a["gpu"]) for a in applier.done if "gpu" in a} | set(applier.reset))
    waiting = sorted(applier.awaiting_reset)
    statuses = gpu_statuses(managed_indexes, applier.touched, applier.failed, waiting)
    outcome = dict(result, changed=bool(applier.done), changed_gpus=changed, actions=applier.done,
                   reboot_required=bool(waiting), reboot_required_gpus=waiting, reset_gpus=applier.reset,
                   layout=achieved(after), diff=diff_of(managed, after), gpu_status=statuses,
                   msg=_message(changed, waiting) + _names_note(result["profile_names"]))
    if applier.failed:
        kinds = {type(e) for e in applier.failed.values() if isinstance(e, MigApplyError)}
        cls = kinds.pop() if len(kinds) == 1 and all(isinstance(e, MigApplyError)
                                                     for e in applier.failed.values()) else MigApplyError
        first_nvml = next((e for e in applier.failed.values() if isinstance(e, NvmlError)), None)
        if first_nvml is not None:
            outcome["nvml_error"] = first_nvml.to_dict()
        raise cls(failure_message(statuses), outcome)
    return outcome


def profile_names(desired: Sequence[Any]) -> list[dict[str, Any]]:
    """``[{gpu, layout, driver}]``: each layout profile name that this GPU's driver calls differently (an alias
    such as GB200's ``1g.24gb``, which production drivers print as ``1g.23gb``), with the driver's name."""
    return [{"gpu": config.index, "layout": layout, "driver": driver}
            for config in desired for layout, driver in sorted(config.profile_names.items())]


def _names_note(names: Sequence[Mapping[str, Any]]) -> str:
    if not names:
        return ""
    return "; the driver's names for the layout's profiles: " + ", ".join(
        "GPU {gpu} {layout} -> {driver}".format(**item) for item in names)


def _message(changed: Sequence[int], waiting: Sequence[int], check_mode: bool = False) -> str:
    verb = "would change" if check_mode else "changed"
    text = "MIG layout already applied" if not changed else "{} GPU(s) {}".format(
        verb, ", ".join(str(i) for i in changed))
    if waiting:
        text += ("; the MIG mode change of GPU(s) {} waits for a GPU reset: reboot the host or run again with "
                 "allow_reset: true".format(", ".join(str(i) for i in waiting)))
    return text
