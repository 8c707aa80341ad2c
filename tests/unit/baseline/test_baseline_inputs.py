"""Inventory strings and secrets in the baseline roles' preflight: real ``ansible-playbook`` runs on localhost.

Each run includes only a role's preflight (asserts and reads, nothing changes) with the inventory value that issue
13 reported, and checks the exact sentence the user sees and that a secret never reaches the output, even at -vvv.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
INJECTION = '--verbose\nExecStartPre=/bin/sh -c "id > /root/pwned"'


def _preflight(tmp_path: Path, role: str, variables: dict, *, facts: bool = False, verbose: bool = False):
    playbook = tmp_path / "preflight.yml"
    playbook.write_text(
        "- hosts: localhost\n"
        f"  gather_facts: {str(facts).lower()}\n"
        "  gather_subset: [min]\n"
        "  tasks:\n"
        "    - ansible.builtin.include_role:\n"
        f"        name: gpufleet.nvidia.{role}\n"
        "        tasks_from: preflight.yml\n",
        encoding="utf-8",
    )
    extra = tmp_path / "vars.json"
    extra.write_text(json.dumps({"ansible_python_interpreter": sys.executable, **variables}), encoding="utf-8")
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections"), XDG_CACHE_HOME=str(tmp_path / "cache"))
    argv = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local", str(playbook),
            "-e", f"@{extra}"] + (["-vvv"] if verbose else [])
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, check=False, timeout=300)
    return proc.returncode, proc.stdout + proc.stderr


def _one_line(output: str) -> str:
    """The output with the YAML callback's line folding undone."""
    return " ".join(output.split())


@pytest.mark.parametrize(
    ("role", "variables", "message"),
    [
        ("nvidia_driver", {"nvidia_driver_persistenced_args": INJECTION},
         'nvidia_driver: nvidia_driver_persistenced_args is not safe to write into a file or command line on the '
         'host (got "--verbose\\nExecStartPre=/bin/sh -c "id > /root/pwned""); it may hold only letters, digits, '
         'spaces and _ . / : = , @ % + - (no quotes, no shell or systemd syntax). Nothing was changed.'),
        ("nvidia_driver", {"nvidia_driver_module_params": {"nvidia": {"NVreg_X": "1\ninstall nvidia /bin/sh"}}},
         'nvidia_driver: nvidia_driver_module_params.nvidia.NVreg_X is not safe to write into a file or command line '
         'on the host (got "NVreg_X=1\\ninstall nvidia /bin/sh"); it may hold only letters, digits, spaces and _ . / '
         ': = , @ % + - (no quotes, no shell or systemd syntax). Nothing was changed.'),
        ("nvidia_driver", {"nvidia_driver_mok_key": '/k"\nmok_certificate="/tmp/evil'},
         'nvidia_driver: nvidia_driver_mok_key is not safe to write into a file or command line on the host (got '
         '"/k"\\nmok_certificate="/tmp/evil"); it may hold only an absolute path of letters, digits and _ . / @ + -. '
         'Nothing was changed.'),
        ("nvidia_container_toolkit", {"nvidia_container_toolkit_repo_suite": "/\nTrusted: yes"},
         'nvidia_container_toolkit: nvidia_container_toolkit_repo_suite is not safe to write into a file or command '
         'line on the host (got "/\\nTrusted: yes"); it may hold only a Debian suite or path of letters, digits and '
         '_ . / ~ + -. Nothing was changed.'),
        ("nvidia_dcgm", {"nvidia_dcgm_hostengine_listen": "127.0.0.1:5555\nExecStartPost=/bin/touch /x"},
         'nvidia_dcgm: nvidia_dcgm_hostengine_listen is not safe to write into a file or command line on the host '
         '(got "127.0.0.1:5555\\nExecStartPost=/bin/touch /x"); it may hold only host:port, the host a name, an IPv4 '
         'address or a [bracketed] IPv6 address. Nothing was changed.'),
        # a trailing newline: Ansible's `match` is re.match, whose $ matches before it; the roles' patterns end in \\Z
        ("slurm_gres", {"slurm_gres_node_name": "gpu-a\n"},
         "slurm_gres: the node name must be a Slurm node name (letters, digits, '.', '_', '-'; got \"gpu-a\\n\")"),
        ("nvml_python", {"nvml_python_index_url": "http://mirror.example/simple/"},
         "nvml_python: the index http://mirror.example/simple/ is plain http, so the nvidia-ml-py wheel that "
         "gpufleet's modules run as root could be swapped on the way; use an https:// index, or set "
         "nvml_python_index_allow_http: true (with nvml_python_package_sha256) for a trusted local mirror."),
    ],
    ids=["persistenced-args", "module-params", "mok-key", "toolkit-suite", "dcgm-listen", "slurm-node-newline",
         "nvml-http-index"],
)
def test_unsafe_inventory_values_are_refused_in_preflight(tmp_path, role, variables, message) -> None:
    rc, output = _preflight(tmp_path, role, variables)
    assert rc == 2, output
    assert message in _one_line(output)


def test_http_index_with_opt_in_passes_preflight(tmp_path) -> None:
    rc, output = _preflight(tmp_path, "nvml_python", {"nvml_python_index_url": "http://127.0.0.1:8765/pypi/simple/",
                                                      "nvml_python_index_allow_http": True})
    assert rc == 0, output


def test_repository_credentials_never_reach_the_output(tmp_path) -> None:
    """An unreachable mirror with credentials: the failure names the masked URL, and -vvv shows no token."""
    rc, output = _preflight(
        tmp_path, "nvidia_container_toolkit",
        {"nvidia_container_toolkit_repo_url": "https://ci-bot:S3cr3tT0ken@127.0.0.1:9/libnvidia-container/",
         "nvidia_container_toolkit_repo_timeout": 5},
        facts=True, verbose=True)
    assert rc == 2, output
    assert ("nvidia_container_toolkit: cannot read the repository index "
            "https://***@127.0.0.1:9/libnvidia-container/Packages (") in _one_line(output)
    assert "S3cr3tT0ken" not in output
