#!/usr/bin/env python3
# Installed by the gpufleet.nvidia.nvidia_mig role (do not edit; the role replaces it).
"""gpufleet-mig-apply: re-apply the MIG layout recorded by the nvidia_mig role, without Ansible.

Run at boot by ``gpufleet-mig-apply.service`` (GPU instances do not survive a reboot, and on Hopper the MIG mode
does not either). It imports the same ``module_utils`` as the ``gpufleet.nvidia.nvidia_mig`` module (installed by
the role under ``/opt/gpufleet/lib``, or ``$GPUFLEET_MIG_LIB``) and calls the same ``converge()``: validate the
recorded layout against the GPUs, plan, refuse busy GPUs, apply, verify. It never writes the state file (that is
the role's record); what it did goes to stdout, i.e. the journal.

Exit status: 0 applied (or nothing to do), 1 the apply failed, 2 the state file is missing or unreadable.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from typing import Any, TextIO

DEFAULT_LIB = "/opt/gpufleet/lib"
DEFAULT_STATE = "/etc/gpufleet/mig-state.json"


def _say(text: str, stream: TextIO = sys.stdout) -> None:
    stream.write(text + "\n")
    stream.flush()


def run(argv: list[str]) -> tuple[int, str, str]:
    """Run a command with the C locale (the GPU reset); return ``(rc, stdout, stderr)``."""
    env = dict(os.environ, LC_ALL="C", LANG="C")
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    return proc.returncode, proc.stdout, proc.stderr


def load_state(path: str) -> dict[str, Any]:
    """The record written by the role: ``{layout_name, layout, gpu_indexes, allow_reset, state, gpus}``."""
    with open(path, encoding="utf-8") as handle:
        state = json.load(handle)
    if not isinstance(state, dict) or not isinstance(state.get("layout"), list):
        raise ValueError(f"{path} has no 'layout' list")
    return state


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(prog="gpufleet-mig-apply", description=__doc__.splitlines()[0])
    parser.add_argument("--state", default=DEFAULT_STATE, help=f"the role's record (default {DEFAULT_STATE})")
    parser.add_argument("--check", action="store_true", help="only print the plan; change nothing")
    parser.add_argument("--json", action="store_true", help="print the whole result as JSON")
    args = parser.parse_args(argv)
    sys.path.insert(0, os.environ.get("GPUFLEET_MIG_LIB", DEFAULT_LIB))
    from ansible_collections.gpufleet.nvidia.plugins.module_utils.mig_apply import MigApplyError, converge
    from ansible_collections.gpufleet.nvidia.plugins.module_utils.nvml import NvmlError, nvml_session

    try:
        state = load_state(args.state)
    except (OSError, ValueError) as exc:
        _say(f"gpufleet-mig-apply: cannot read the recorded MIG layout: {exc}", sys.stderr)
        return 2
    try:
        with nvml_session() as nvml:
            result = converge(nvml, state["layout"], indexes=state.get("gpu_indexes"),
                              allow_reset=bool(state.get("allow_reset", True)), force_destroy_busy=False,
                              check_mode=args.check, run=run, smi=shutil.which("nvidia-smi") or "nvidia-smi")
    except (MigApplyError, NvmlError) as exc:
        _say(f"gpufleet-mig-apply: layout '{state.get('layout_name')}' failed: {exc}", sys.stderr)
        if args.json and isinstance(exc, MigApplyError):
            _say(json.dumps(exc.partial, indent=2, sort_keys=True, default=str))
        return 1
    if args.json:
        _say(json.dumps(result, indent=2, sort_keys=True, default=str))
    else:
        _say(f"gpufleet-mig-apply: layout '{state.get('layout_name')}': {result['msg']}")
        _say(result["plan_summary"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
