"""nvidia_dcgm's exporter options refused in preflight, before anything changes: a real ``ansible-playbook`` run on
localhost of the role's preflight only. The options themselves are proven on a host by the nvidia_dcgm Molecule
scenario (profiling counters on a MIG-capable A30, a job file labelling a GPU's metrics)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _preflight(tmp_path: Path, variables: dict) -> tuple[int, str]:
    playbook = tmp_path / "preflight.yml"
    playbook.write_text("- hosts: localhost\n  gather_facts: false\n  tasks:\n    - ansible.builtin.include_role:\n"
                        "        name: gpufleet.nvidia.nvidia_dcgm\n        tasks_from: preflight.yml\n",
                        encoding="utf-8")
    extra = tmp_path / "vars.json"
    extra.write_text(json.dumps({"ansible_python_interpreter": sys.executable, **variables}), encoding="utf-8")
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections"), XDG_CACHE_HOME=str(tmp_path / "cache"))
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local",
                           str(playbook), "-e", f"@{extra}"], cwd=REPO, env=env, capture_output=True, text=True,
                          check=False, timeout=300)
    return proc.returncode, " ".join((proc.stdout + proc.stderr).split())


SETTINGS = ("nvidia_dcgm: cuda_major must be null, 11, 12 or 13 (got null), health watches 'a' or letters of pmitnd "
            "(got a), the exporter address host:port such as 127.0.0.1:9400 (got 127.0.0.1:9400), every counter "
            "(profiling ones too) a DCGM_FI_* field of type gauge, counter or label, nvidia_dcgm_exporter_profiling "
            "auto, always or never (got {profiling}), and the HPC job-mapping directory null or an absolute path "
            "(got {job_dir}).")


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        ({"nvidia_dcgm_exporter_hpc_job_mapping_dir": "/run/jobs\nExecStartPre=/bin/true"},
         'nvidia_dcgm: nvidia_dcgm_exporter_hpc_job_mapping_dir is not safe to write into a file or command line on '
         'the host (got "/run/jobs\\nExecStartPre=/bin/true"); it may hold only an absolute path of letters, digits '
         "and _ . / @ + -. Nothing was changed."),
        ({"nvidia_dcgm_exporter_profiling": "sometimes"}, SETTINGS.format(profiling="sometimes", job_dir="null")),
        ({"nvidia_dcgm_exporter_profiling_counters": [{"field": "PROF_SM_ACTIVE", "type": "gauge", "help": "x"}]},
         SETTINGS.format(profiling="auto", job_dir="null")),
    ],
    ids=["job-dir-injection", "profiling-choice", "profiling-counter-name"],
)
def test_bad_exporter_options_are_refused(tmp_path: Path, variables: dict, message: str) -> None:
    rc, output = _preflight(tmp_path, variables)
    assert rc == 2, output
    assert message in output


def test_a_job_directory_and_always_pass(tmp_path: Path) -> None:
    rc, output = _preflight(tmp_path, {"nvidia_dcgm_exporter_hpc_job_mapping_dir": "/run/gpufleet/dcgm-jobs",
                                       "nvidia_dcgm_exporter_profiling": "always"})
    assert rc == 0, output
