"""nvidia_imex preflight on localhost: the NVLink domain from the inventory, the node addresses and the driver, each
refused with the exact sentence the operator sees, before any change (preflight only asserts and reads).

Real ``ansible-playbook`` runs: an inventory of two "trays" that both connect locally, the role's preflight only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
PLAYBOOK = """\
- hosts: all
  gather_facts: false
  tasks:
    - ansible.builtin.include_role:
        name: gpufleet.nvidia.nvidia_imex
        tasks_from: preflight.yml
"""


def preflight(tmp_path: Path, groups: dict[str, dict[str, Any]], extra: dict[str, Any] | None = None,
              limit: str = "tray1") -> tuple[int, list[str]]:
    """Run the preflight; return the exit status and the failed tasks' messages."""
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory = {"all": {"vars": {"nvidia_imex_domain_groups": ["rack1", "rack2"], **(extra or {})},
                         "children": {name: {"hosts": {host: {**local, **hostvars} for host, hostvars in hosts.items()}}
                                      for name, hosts in groups.items()}}}
    (tmp_path / "hosts.json").write_text(json.dumps(inventory), encoding="utf-8")
    (tmp_path / "preflight.yml").write_text(PLAYBOOK, encoding="utf-8")
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections"), XDG_CACHE_HOME=str(tmp_path / "cache"),
               ANSIBLE_STDOUT_CALLBACK="ansible.posix.json")
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(tmp_path / "hosts.json"),
                           "--limit", limit, str(tmp_path / "preflight.yml")], cwd=REPO, env=env,
                          capture_output=True, text=True, check=False, timeout=300)
    try:
        doc = json.loads(proc.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"no JSON from ansible-playbook (rc {proc.returncode}):\n"
                    f"{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    failed = [str(result.get("msg", "")) for play in doc["plays"] for task in play["tasks"]
              for result in task["hosts"].values() if result.get("failed")]
    return proc.returncode, failed


TWO = {"tray1": {"nvidia_imex_address": "10.0.0.1"}, "tray2": {"nvidia_imex_address": "10.0.0.2"}}


@pytest.mark.parametrize(("groups", "extra", "message"), [
    ({"rack1": TWO, "rack2": {"tray1": {}}}, {},
     "nvidia_imex: tray1 is in more than one NVLink domain group (rack1, rack2); an NVL72 compute tray is in one "
     "domain. Fix the inventory or set nvidia_imex_domain for it. Nothing was changed."),
    ({"other": TWO}, {},
     "nvidia_imex: tray1 is in no NVLink domain; add it to one of the groups of nvidia_imex_domain_groups (rack1, "
     "rack2) or set nvidia_imex_domain to its domain's inventory group. Nothing was changed."),
    ({"rack1": TWO}, {"nvidia_imex_domain": "rack9"},
     "nvidia_imex: the NVLink domain of tray1 is rack9, but that is no inventory group with tray1 in it; "
     "nvidia_imex_domain names the group whose hosts form the domain. Nothing was changed."),
    ({"rack1": {"tray1": {"nvidia_imex_address": "10.0.0.1"}, "tray2": {"ansible_host": "tray2.example.com"},
                "tray3": {"nvidia_imex_address": "10.0.0.256"}}}, {},
     'nvidia_imex: every node of NVLink domain rack1 needs its own IP address (nodes_config.cfg lists one per line), '
     'but tray2 has none; tray3 has "10.0.0.256". Set nvidia_imex_address (or an IP address as ansible_host) for '
     'each member in the inventory. Nothing was changed.'),
    ({"rack1": {"tray1": {"nvidia_imex_address": "10.0.0.1"}, "tray2": {"ansible_host": "10.0.0.1"}}}, {},
     "nvidia_imex: the nodes of NVLink domain rack1 need different IMEX addresses (got 10.0.0.1, 10.0.0.1); fix "
     "nvidia_imex_address in the inventory. Nothing was changed."),
    ({"rack1": TWO}, {"nvidia_imex_nodes_config_file": "/etc/nvidia-imex/nodes.cfg\nIMEX_CMD_PORT=1"},
     'nvidia_imex: nvidia_imex_nodes_config_file is not safe to write into a file or command line on the host (got '
     '"/etc/nvidia-imex/nodes.cfg\\nIMEX_CMD_PORT=1"); it may hold only an absolute path of letters, digits and _ . '
     '/ @ + -. Nothing was changed.'),
    ({"rack1": TWO}, {"nvidia_imex_cmd_port": 50000},
     "nvidia_imex: the IMEX ports must be two different TCP ports (got server 50000, command 50000), the channel "
     "mode an octal mode such as 0666 (got 0666) and the verify timeout a number of seconds above 0 (got 300). "
     "Nothing was changed."),
])
def test_a_bad_domain_is_refused_with_one_sentence(tmp_path: Path, groups: dict[str, dict[str, Any]],
                                                   extra: dict[str, Any], message: str) -> None:
    assert preflight(tmp_path, groups, extra) == (2, [message])


def test_a_good_domain_passes_to_the_driver_check(tmp_path: Path) -> None:
    """With the domain right, preflight goes on to the driver, which this machine lacks (no nvidia-driver package)."""
    rc, failed = preflight(tmp_path, {"rack1": {**TWO, "tray3": {"ansible_host": "fd00::3"}}})
    assert (rc, failed) == (2, [
        "nvidia_imex: no NVIDIA driver is installed on tray1 (package nvidia-driver); IMEX is installed at the "
        "driver's version, so run the nvidia_driver role first. Nothing was changed."])
