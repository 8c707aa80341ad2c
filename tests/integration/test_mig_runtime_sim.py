"""gpufleet.nvidia.nvidia_mig_runtime: the boot unit's code comes from the module's own payload (issue 11: no
copy from ``{{ role_path }}/../../plugins``). Real Ansible, local connection."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _mig_sim import ROOT, new_state, run_module, sim_lib_dir

#: what the boot entry point imports: the MIG code and command.py (the C locale of its commands)
NAMES = ["command.py", "nvml.py", "mig_apply.py", "mig_layout.py", "mig_planner.py", "mig_parted.py",
         "mig_profiles.py", "mig_entries.py", "mig_gpus.py", "mig_host.py", "mig_read.py",
         "mig_types.py"]


def test_runtime_installs_the_collections_module_utils_once(tmp_path: Path) -> None:
    lib, state = tmp_path / "lib", new_state(tmp_path / "state.json", "1xH200")
    target = lib / "ansible_collections" / "gpufleet" / "nvidia" / "plugins" / "module_utils"
    rc, check = run_module("nvidia_mig_runtime", {"lib_dir": str(lib)}, sim_lib_dir(), state, tmp_path, check=True)
    assert (rc, check["changed"]) == (0, True), check.get("msg")
    assert not lib.exists()
    rc, first = run_module("nvidia_mig_runtime", {"lib_dir": str(lib)}, sim_lib_dir(), state, tmp_path)
    assert (rc, first["changed"]) == (0, True), first.get("msg")
    assert sorted(first["files"]) == sorted(str(target / n) for n in NAMES)
    for name in NAMES:
        assert (target / name).read_bytes() == (ROOT / "plugins" / "module_utils" / name).read_bytes()
        assert (target / name).stat().st_mode & 0o777 == 0o644
    rc, again = run_module("nvidia_mig_runtime", {"lib_dir": str(lib)}, sim_lib_dir(), state, tmp_path)
    assert (rc, again["changed"], again["files"]) == (0, False, [])
    (target / "mig_apply.py").write_text("# changed by hand\n", encoding="utf-8")
    rc, repaired = run_module("nvidia_mig_runtime", {"lib_dir": str(lib)}, sim_lib_dir(), state, tmp_path)
    assert (rc, repaired["files"]) == (0, [str(target / "mig_apply.py")])
    assert (target / "mig_apply.py").read_bytes() == (ROOT / "plugins" / "module_utils" / "mig_apply.py").read_bytes()
