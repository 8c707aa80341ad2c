# Copyright: gpufleet contributors
# SPDX-License-Identifier: Apache-2.0 (see LICENSE)
"""Host-wide checks made from a command's output: ``dcgmi diag`` and the container smoke test (pure functions)."""

from __future__ import annotations

import re

from ansible_collections.gpufleet.nvidia.plugins.module_utils.health_base import FAIL, OK, check


def evaluate_dcgm_diag(level: int, rc: int, output: str) -> dict:
    """``dcgmi diag -r <level>``: fail on a non-zero exit or a ``Fail``/``Error`` result line (deepops' rule)."""
    bad = [line.strip(" |") for line in output.splitlines() if re.search(r"\b(Fail|FAIL|Error|ERROR)\b", line)]
    threshold = f"level {level} passes"
    if rc != 0 or bad:
        detail = "; ".join(bad[:5]) or f"exit status {rc}"
        return check("dcgm_diag", None, FAIL, bad or rc, threshold, f"dcgmi diag -r {level} failed: {detail}")
    return check("dcgm_diag", None, OK, [], threshold, f"dcgmi diag -r {level} passed")


def evaluate_container_smoke(rc: int, stdout: str, stderr: str, gpu_count: int | None) -> dict:
    """A container with every GPU must list them all with ``nvidia-smi -L``."""
    listed = len([line for line in stdout.splitlines() if line.startswith("GPU ")])
    if rc != 0:
        last = (stderr or stdout).strip().splitlines()
        return check("container_smoke", None, FAIL, listed, gpu_count,
                     f"the GPU container exited with status {rc}: {last[-1] if last else 'no output'}")
    if gpu_count is not None and listed != gpu_count:
        return check("container_smoke", None, FAIL, listed, gpu_count,
                     f"the GPU container sees {listed} GPU(s), the host has {gpu_count}")
    return check("container_smoke", None, OK, listed, gpu_count, f"the GPU container sees {listed} GPU(s)")
