"""A mirror URL with credentials never reaches the output: the nvml_python preflight masks it in its message.

A real ``ansible-playbook`` run of the role's preflight on localhost (it only asserts: nothing changes).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def test_preflight_masks_credentials_in_the_index_url(tmp_path: Path) -> None:
    playbook = tmp_path / "preflight.yml"
    playbook.write_text(
        "- hosts: localhost\n"
        "  gather_facts: false\n"
        "  tasks:\n"
        "    - ansible.builtin.include_role:\n"
        "        name: gpufleet.nvidia.nvml_python\n"
        "        tasks_from: preflight.yml\n",
        encoding="utf-8",
    )
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections"))
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local", str(playbook),
         "-e", "nvml_python_index_url=ftp://builder:s3cret-token@mirror.example/simple/"],
        cwd=REPO, env=env, capture_output=True, text=True, check=False, timeout=120)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 2, output
    assert ("nvml_python_index_url must be an http(s) URL without spaces, quotes or control characters (got "
            "ftp://***@mirror.example/simple/)") in output
    assert "s3cret-token" not in output
