#!/usr/bin/env python3
# Installed by the gpufleet.nvidia.nvidia_mig role (do not edit; the role replaces it).
"""gpufleet-mig-apply: apply the MIG layout recorded by the nvidia_mig role on this host, without Ansible.

Two uses, the same code as the ``gpufleet.nvidia.nvidia_mig`` module (it imports the module_utils the role
installs under ``--lib`` (the role's ``nvidia_mig_lib_dir``) or ``$GPUFLEET_MIG_LIB``, and calls the same
``converge()``):

* at boot (``gpufleet-mig-apply.service``): GPU instances do not survive a reboot, and on Hopper the MIG mode
  does not either. It applies what it can: a lost or failing GPU is left out, the others converge, and it exits 1
  naming the failed GPU.
* ``--transaction`` (the role runs it as a transient systemd unit): stop the given GPU clients, apply, start
  them again and record the outcome in the state file -- one host-side transaction that finishes even when the
  controller (ansible-playbook, the SSH link) goes away in the middle.

Every run holds the host's MIG lock (``flock`` on ``/run/gpufleet/mig.lock``), shared with the module: a
second run waits up to ``--lock-timeout`` seconds, then exits 3 naming the holder, having changed nothing.

Exit status: 0 applied (or nothing to do), 1 the apply failed, 2 the state file is missing or unreadable,
3 another run holds the lock.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TextIO

DEFAULT_STATE = "/etc/gpufleet/mig-state.json"
DEFAULT_LOCK = "/run/gpufleet/mig.lock"


def _say(text: str, stream: TextIO = sys.stdout) -> None:
    stream.write(text + "\n")
    stream.flush()


def run(argv: list[str]) -> tuple[int, str, str]:
    """Run a command with the C locale of command.py (the GPU reset, systemctl); return ``(rc, stdout, stderr)``."""
    from ansible_collections.gpufleet.nvidia.plugins.module_utils.command import C_LOCALE  # on --lib, see main()

    env = dict(os.environ, **C_LOCALE)
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    return proc.returncode, proc.stdout, proc.stderr


def load_state(path: str) -> dict[str, Any]:
    """The record written by the role: ``{layout_name, layout, gpu_indexes, allow_reset, state, gpus}``."""
    with open(path, encoding="utf-8") as handle:
        state = json.load(handle)
    if not isinstance(state, dict) or not isinstance(state.get("layout"), list):
        raise ValueError(f"{path} has no 'layout' list")
    return state


def write_state(path: str, record: dict[str, Any]) -> None:
    """Replace the state file atomically (a reader never sees half a record)."""
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, mode=0o755, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".mig-state.")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(json.dumps(record, indent=4, sort_keys=True) + "\n")
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


class _Unreadable(Exception):
    """The record (or the role's request) cannot be read."""


class Terminated(Exception):
    """SIGTERM, SIGHUP or SIGINT arrived: unwind so that the stopped clients are started again."""


def _terminate(signum: int, _frame: Any) -> None:
    raise Terminated(f"stopped by signal {signal.Signals(signum).name}")


@contextmanager
def clients_stopped(units: list[str], say: Callable[[str], None]) -> Iterator[list[str]]:
    """Stop ``units`` (last one first), yield, then start exactly those again (first one first), whatever
    happened in between. The start failures are reported, not raised."""
    stopped: list[str] = []
    try:
        for unit in reversed(units):
            stopped.append(unit)  # before the stop: a stop cut short by a signal is started again too
            rc, out, err = run(["systemctl", "stop", unit])
            if rc != 0:
                raise RuntimeError("systemctl stop {} exited {}: {}".format(unit, rc, " ".join((err or out).split())))
        yield stopped
    finally:
        for unit in reversed(stopped):
            rc, out, err = run(["systemctl", "start", unit])
            say("gpufleet-mig-apply: started {} again{}".format(
                unit, "" if rc == 0 else " -- FAILED ({}): {}".format(rc, " ".join((err or out).split()))))


def _record(request: dict[str, Any], state: str, gpus: Any) -> dict[str, Any]:
    """The state file's record (the shape the role writes): the request with its state and what the GPUs show."""
    record = {k: v for k, v in request.items() if k != "force_destroy_busy"}
    record["state"] = state
    if gpus is not None:
        record["gpus"] = gpus
    return record


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(prog="gpufleet-mig-apply", description=__doc__.splitlines()[0])
    parser.add_argument("--state", default=DEFAULT_STATE, help=f"the role's record (default {DEFAULT_STATE})")
    parser.add_argument("--check", action="store_true", help="only print the plan; change nothing")
    parser.add_argument("--json", action="store_true", help="print the whole result as JSON")
    parser.add_argument("--lib", default=os.environ.get("GPUFLEET_MIG_LIB"),
                        help="where nvidia_mig_runtime installed the module_utils (the role passes its "
                        "nvidia_mig_lib_dir; default $GPUFLEET_MIG_LIB)")
    parser.add_argument("--lock-file", default=DEFAULT_LOCK, help=f"the host's MIG lock (default {DEFAULT_LOCK})")
    parser.add_argument("--lock-timeout", type=float, default=300.0,
                        help="seconds to wait for the lock, then exit 3 naming the holder (default 300)")
    parser.add_argument("--transaction", action="store_true",
                        help="stop --stop-client units, apply, start them again, record the outcome in --state")
    parser.add_argument("--stop-client", action="append", default=[], metavar="UNIT",
                        help="a running GPU client to stop during the apply (repeat; in start order)")
    parser.add_argument("--request", help="with --transaction: the record to apply (written by the role); the "
                        "outcome is recorded in --state")
    parser.add_argument("--result", help="write the result (JSON) to this file")
    args = parser.parse_args(argv)
    if not args.lib:
        parser.error("--lib (or $GPUFLEET_MIG_LIB) is required: the directory nvidia_mig_runtime installed the "
                     "module_utils under (the role's nvidia_mig_lib_dir)")
    sys.path.insert(0, args.lib)
    from ansible_collections.gpufleet.nvidia.plugins.module_utils.mig_apply import (
        LockBusy,
        MigApplyError,
        converge,
        host_lock,
    )
    from ansible_collections.gpufleet.nvidia.plugins.module_utils.nvml import NvmlError, nvml_session

    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(signum, _terminate)
    name: Any = None
    holder = "gpufleet-mig-apply{}".format(" --transaction" if args.transaction else "")
    outcome: dict[str, Any] = {"failed": True, "msg": "not started"}
    rc = 1
    started = time.monotonic()
    try:
        with host_lock(args.lock_file, args.lock_timeout, holder):
            # Read under the lock: the record a transaction that held the lock before this one has just written is
            # the one to apply at boot, never the one it replaced.
            try:
                state = load_state(args.request or args.state)
            except (OSError, ValueError) as exc:
                raise _Unreadable(f"cannot read the recorded MIG layout: {exc}") from exc
            name = state.get("layout_name")
            record_it = args.transaction and not args.check
            if record_it:
                write_state(args.state, _record(state, "pending", None))  # truthful while the apply runs
            try:
                with clients_stopped(args.stop_client if args.transaction else [], _say) as stopped:
                    outcome["stopped_clients"] = stopped
                    with nvml_session() as nvml:
                        result = converge(nvml, state["layout"], indexes=state.get("gpu_indexes"),
                                          allow_reset=bool(state.get("allow_reset", True)),
                                          force_destroy_busy=bool(state.get("force_destroy_busy", False)),
                                          check_mode=args.check, run=run,
                                          smi=shutil.which("nvidia-smi") or "nvidia-smi")
                outcome.update(result, failed=False)
                rc = 0
            except (MigApplyError, NvmlError, RuntimeError, Terminated) as exc:
                outcome.update(getattr(exc, "partial", {}), failed=True, msg=str(exc), error_type=type(exc).__name__)
                if isinstance(exc, NvmlError):
                    outcome["nvml_error"] = exc.to_dict()
            if record_it:
                write_state(args.state, _record(state, "failed" if outcome["failed"] else
                                                "pending" if outcome.get("reboot_required") else "success",
                                                outcome.get("layout")))
    except LockBusy as exc:
        outcome.update(exc.partial, failed=True, msg=str(exc), error_type="LockBusy")
        rc = 3
    except _Unreadable as exc:
        outcome.update(failed=True, msg=str(exc), error_type="Unreadable")
        rc = 2
    except Terminated as exc:
        outcome.update(failed=True, msg=str(exc), error_type="Terminated")
    outcome.pop("warnings", None)
    outcome["seconds"] = round(time.monotonic() - started, 3)
    if args.result:
        write_state(args.result, outcome)
    if outcome["failed"]:
        what = f"layout '{name}'" if name is not None else "the recorded layout"
        _say(f"gpufleet-mig-apply: {what} failed: {outcome['msg']}", sys.stderr)
        if args.json:
            _say(json.dumps(outcome, indent=2, sort_keys=True, default=str))
        return rc
    if args.json:
        _say(json.dumps(outcome, indent=2, sort_keys=True, default=str))
    else:
        _say(f"gpufleet-mig-apply: layout '{name}': {outcome['msg']}")
        _say(outcome["plan_summary"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
