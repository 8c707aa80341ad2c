"""Testinfra checks (podman backend) of the nvidia_imex scenario after converge and idempotence: NVLink domain
nvl72_a (imex-a, imex-b) and nvl72_b (imex-d) formed from the inventory groups, every node READY in
``nvidia-imex-ctl -N -j``, the node list in inventory order, the channel device, the daemon's settings and the
package at the driver's version; the spare tray imex-c untouched. Each tray's address is read from the harness's
own record on the tray (/etc/ansible/facts.d/gpufleet_lab.fact), not from the role."""

from __future__ import annotations

import json

import testinfra

#: the NVLink domains of the scenario's inventory (molecule.yml's platform groups), in inventory order
DOMAINS = {"imex-a": ["imex-a", "imex-b"], "imex-b": ["imex-a", "imex-b"], "imex-d": ["imex-d"]}
CHANNEL = "/dev/nvidia-caps-imex-channels/channel0"
#: the 570 driver of the simulated repository (simulator/src/gpufleet_sim/packaging.py); IMEX comes at its version
IMEX_VERSION = "570.172.08-1"


def _name(host) -> str:
    return host.check_output("hostname")


def _address(name: str) -> str:
    tray = testinfra.get_host(f"podman://{name}")
    return str(json.loads(tray.file("/etc/ansible/facts.d/gpufleet_lab.fact").content_string)["loopback"])


def test_every_node_of_the_domain_is_ready(host) -> None:
    name = _name(host)
    if name not in DOMAINS:
        assert not host.package("nvidia-imex-570").is_installed   # the spare tray: in no domain yet
        return
    doc = json.loads(host.check_output("nvidia-imex-ctl -N -j"))
    assert doc["status"] == "UP"
    assert [(node["host"], node["status"]) for node in doc["nodes"].values()] == [
        (_address(member), "READY") for member in DOMAINS[name]]


def test_node_list_and_channel_device(host) -> None:
    name = _name(host)
    if name not in DOMAINS:
        assert not host.file(CHANNEL).exists
        return
    assert host.file("/etc/nvidia-imex/nodes_config.cfg").content_string == "".join(
        f"{_address(member)}\n" for member in DOMAINS[name])
    assert host.check_output("stat -c %%F %s", CHANNEL) == "character special file"


def test_daemon_binds_its_own_address_on_the_configured_ports(host) -> None:
    name = _name(host)
    if name not in DOMAINS:
        assert not host.file("/etc/nvidia-imex/config.cfg").exists
        return
    config = host.check_output("grep -E '^(BIND_INTERFACE_IP|SERVER_PORT|IMEX_CMD_PORT)=' /etc/nvidia-imex/config.cfg")
    assert config == f"BIND_INTERFACE_IP={_address(name)}\nSERVER_PORT=50000\nIMEX_CMD_PORT=50005"


def test_imex_package_at_the_driver_version(host) -> None:
    if _name(host) not in DOMAINS:
        assert not host.service("nvidia-imex").is_running
        return
    assert host.check_output("dpkg-query -W -f '${Version}' nvidia-imex-570") == IMEX_VERSION
    assert host.service("nvidia-imex").is_running
    assert host.service("nvidia-imex").is_enabled
