"""Time a MIG apply and its idempotent re-apply per simulated host (figures printed, never asserted).

For each preset: a fresh simulated host, then ``gpufleet.nvidia.nvidia_mig`` through real Ansible (local
connection, the simulator's libnvidia-ml.so.1, a temporary state) - apply, re-apply (no change), check mode -
and the same ``converge()`` in-process without Ansible, to show what Ansible's per-task overhead is.

    python benchmarks/mig_apply.py [--repeat 3] [--preset 8xA100 ...]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests" / "integration"), str(ROOT / "src"), str(ROOT / "collections")]

from _mig_sim import new_state, run_module, sim_bin_dir, sim_lib_dir  # noqa: E402

LAYOUTS = {
    "8xA100": {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2},
    "8xH100-NVSwitch": {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2},
    "4xA30": {"2g.12gb": 1, "1g.6gb": 2},
    "1xH200": {"1g.18gb": 7},
}


def timed(func: Callable[..., object], *args: Any, **kwargs: Any) -> float:
    start = time.perf_counter()
    func(*args, **kwargs)
    return time.perf_counter() - start


def ansible_run(lib: Path, state: Path, tmp: Path, layout: list[dict[str, object]], check: bool = False) -> None:
    rc, result = run_module("nvidia_mig", {"layout": layout}, lib, state, tmp, check=check)
    if rc != 0:
        raise SystemExit(f"nvidia_mig failed: {result.get('msg')}")


def in_process(lib: Path, state: Path, layout: list[dict[str, object]]) -> dict[str, object]:
    """converge() in a child interpreter (LD_LIBRARY_PATH must be set before the library loads)."""
    import json
    import subprocess

    code = (
        "import json, subprocess, sys, time\n"
        "from ansible_collections.gpufleet.nvidia.plugins.module_utils.mig_apply import converge\n"
        "from ansible_collections.gpufleet.nvidia.plugins.module_utils.nvml import nvml_session\n"
        "run = lambda argv: (lambda p: (p.returncode, p.stdout, p.stderr))("
        "subprocess.run(argv, capture_output=True, text=True))\n"
        "layout = json.loads(sys.argv[1])\n"
        "times = []\n"
        "for _ in range(2):\n"
        "    t = time.perf_counter()\n"
        "    with nvml_session() as n:\n"
        "        r = converge(n, layout, run=run, smi='nvidia-smi')\n"
        "    times.append(time.perf_counter() - t)\n"
        "print(json.dumps({'apply': times[0], 'reapply': times[1], 'actions': len(r['actions'])}))\n"
    )
    env = dict(os.environ, LD_LIBRARY_PATH=str(lib), NVML_SIM_STATE=str(state),
               PYTHONPATH=f"{ROOT / 'collections'}:{ROOT / 'src'}", PATH=f"{sim_bin_dir()}:{os.environ['PATH']}")
    out = subprocess.run([sys.executable, "-c", code, json.dumps(layout)], env=env, capture_output=True, text=True,
                         check=True)
    data: dict[str, object] = json.loads(out.stdout)
    return data


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per preset (median reported)")
    parser.add_argument("--preset", action="append", choices=sorted(LAYOUTS), help="presets (default: all)")
    args = parser.parse_args()
    lib = sim_lib_dir()
    rows = []
    for preset in args.preset or list(LAYOUTS):
        layout = [{"devices": "all", "mig_enabled": True, "gpu_instances": LAYOUTS[preset]}]
        apply_s, reapply_s, check_s, raw_apply, raw_reapply = [], [], [], [], []
        for _ in range(args.repeat):
            with tempfile.TemporaryDirectory(prefix="mig-bench-") as name:
                tmp = Path(name)
                state = new_state(tmp / "state.json", preset, seed="bench")
                check_s.append(timed(ansible_run, lib, state, tmp, layout, check=True))
                apply_s.append(timed(ansible_run, lib, state, tmp, layout))
                reapply_s.append(timed(ansible_run, lib, state, tmp, layout))
                state = new_state(tmp / "state.json", preset, seed="bench")
                raw = in_process(lib, state, layout)
                raw_apply.append(float(raw["apply"]))  # type: ignore[arg-type]
                raw_reapply.append(float(raw["reapply"]))  # type: ignore[arg-type]
        rows.append((preset, statistics.median(check_s), statistics.median(apply_s), statistics.median(reapply_s),
                     statistics.median(raw_apply), statistics.median(raw_reapply)))
    header = ("preset", "check (s)", "apply (s)", "re-apply (s)", "converge() apply", "converge() re-apply")
    widths = [max(len(h), 16) for h in header]
    sys.stdout.write("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)) + "\n")
    for row in rows:
        cells = [row[0]] + [f"{value:.3f}" for value in row[1:]]
        sys.stdout.write("  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + "\n")
    sys.stdout.write(f"median of {args.repeat} run(s); Ansible columns include ansible's start-up per task\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
