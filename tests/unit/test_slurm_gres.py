"""The slurm_gres role's filters: GRES types, device files and the Gres= value, as tables; fuzzed with hypothesis.

Expected types are the names Slurm 22.05's NVML plugin printed for the simulated models in the lab
(``slurmd -G``: ``nvidia_a100-sxm4-40gb``, ``nvidia_a30``; MIG ``nvidia_a100_3g.20gb``), written out by hand.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from ansible.errors import AnsibleFilterError
from hypothesis import given
from hypothesis import strategies as st

from gpufleet_lab.loader import load_file

ROOT = Path(__file__).resolve().parents[2]


sg = load_file("slurm_gres_filters", ROOT / "plugins" / "filter" / "slurm_gres.py")
MINORS = "config 1\nmonitor 2\ngpu0/gi0/access 3\ngpu0/gi0/ci0/access 4\ngpu0/gi2/access 21\ngpu0/gi2/ci0/access 22\n" \
         "gpu0/gi9/access 84\ngpu0/gi9/ci0/access 85\ngpu0/gi10/access 93\ngpu0/gi10/ci0/access 94\n"


def _mig_gpu(*gis: tuple[int, str, list[int]]) -> dict[str, Any]:
    return {"index": 0, "minor_number": 0, "name": "NVIDIA A100-SXM4-40GB", "mig": {"current": True},
            "gpu_instances": [{"id": gid, "profile": prof, "compute_instances": [{"id": c} for c in cis]}
                              for gid, prof, cis in gis]}


PLAIN_A30 = [{"index": i, "minor_number": i, "name": "NVIDIA A30", "mig": {"current": False}} for i in range(2)]

CASES: list[tuple[str, list[dict[str, Any]], str, list[tuple[str, list[str]]]]] = [
    ("plain GPUs", PLAIN_A30, "gpu:nvidia_a30:2",
     [("nvidia_a30", ["/dev/nvidia0"]), ("nvidia_a30", ["/dev/nvidia1"])]),
    ("MIG and plain", [_mig_gpu((2, "3g.20gb", [0]), (9, "1g.5gb", [0]), (10, "1g.5gb", [0])),
                       {"index": 1, "minor_number": 1, "name": "NVIDIA A100-SXM4-40GB", "mig": {"current": False}}],
     "gpu:nvidia_a100-sxm4-40gb:1,gpu:nvidia_a100_1g.5gb:2,gpu:nvidia_a100_3g.20gb:1",
     [("nvidia_a100_3g.20gb", ["/dev/nvidia0", "/dev/nvidia-caps/nvidia-cap21", "/dev/nvidia-caps/nvidia-cap22"]),
      ("nvidia_a100_1g.5gb", ["/dev/nvidia0", "/dev/nvidia-caps/nvidia-cap84", "/dev/nvidia-caps/nvidia-cap85"]),
      ("nvidia_a100_1g.5gb", ["/dev/nvidia0", "/dev/nvidia-caps/nvidia-cap93", "/dev/nvidia-caps/nvidia-cap94"]),
      ("nvidia_a100-sxm4-40gb", ["/dev/nvidia1"])]),
    ("MIG mode without instances", [_mig_gpu()], "", []),
    ("a +me profile keeps its slices and memory", [_mig_gpu((0, "1g.10gb+me", [0]))], "gpu:nvidia_a100_1g.10gb:1",
     [("nvidia_a100_1g.10gb", ["/dev/nvidia0", "/dev/nvidia-caps/nvidia-cap3", "/dev/nvidia-caps/nvidia-cap4"])]),
]


@pytest.mark.parametrize(("gpus", "value", "devices"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_devices_and_value(gpus: list[dict[str, Any]], value: str, devices: list[tuple[str, list[str]]]) -> None:
    got = sg.slurm_gres_devices(gpus, MINORS)
    assert [(d["type"], d["files"]) for d in got] == devices
    assert sg.slurm_gres_value(got) == value


ERRORS = [
    ("not a list", "GPUs", "slurm_gres_devices: the input must be gpu_facts' list of GPUs"),
    ("no name", [{"index": 0, "name": " "}], "slurm_gres: a GPU has no usable name (' '); run gpu_facts with NVML"),
    ("bad profile", [_mig_gpu((0, "big", [0]))],
     "slurm_gres: MIG profile 'big' is not <slices>g.<GB>gb; check gpu_facts"),
    ("minor missing", [_mig_gpu((5, "2g.10gb", [0]))],
     "slurm_gres_devices: the driver's mig-minors has no gpu0/gi5; is the NVIDIA driver loaded with MIG support?"),
]


def test_without_mig_minors_mig_devices_keep_only_their_gpu_file() -> None:
    got = sg.slurm_gres_devices([_mig_gpu((2, "3g.20gb", [0, 1]))])
    assert [(d["type"], d["files"]) for d in got] == [("nvidia_a100_3g.20gb", ["/dev/nvidia0"])] * 2


def test_explicit_lines_need_the_mig_minors() -> None:
    with pytest.raises(AnsibleFilterError, match=r"^slurm_gres_devices: the driver's mig-minors has no gpu0/gi2; "):
        sg.slurm_gres_devices([_mig_gpu((2, "3g.20gb", [0]))], "")


@pytest.mark.parametrize(("gpus", "message"), [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS])
def test_errors_name_the_problem(gpus: Any, message: str) -> None:
    with pytest.raises(AnsibleFilterError) as exc:
        sg.slurm_gres_devices(gpus, MINORS)
    assert str(exc.value) == message


_names = st.text(alphabet=st.characters(codec="ascii", categories=("L", "N", "Zs", "Pd")), min_size=1,
                 max_size=30).filter(str.strip)


@given(st.lists(st.tuples(_names, st.booleans()), max_size=8))
def test_fuzz_value_counts_every_device_once_and_types_have_no_blanks(gpus: list[tuple[str, bool]]) -> None:
    facts = [{"index": i, "minor_number": i, "name": name, "mig": {"current": False}} for i, (name, _) in
             enumerate(gpus)]
    devices = sg.slurm_gres_devices(facts)
    value = sg.slurm_gres_value(devices)
    assert sum(int(part.rsplit(":", 1)[1]) for part in value.split(",") if part) == len(facts)
    assert all(" " not in d["type"] and d["type"] == d["type"].lower() for d in devices)
