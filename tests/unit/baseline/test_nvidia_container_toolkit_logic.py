"""nvidia_container_toolkit: compare-then-act decisions (what nvidia-ctk would add) and package change detection.

The expressions come from the role's task files and are rendered by Ansible's templating engine.
"""

from __future__ import annotations

import base64
import json

import pytest

from .conftest import find_task

ROLE = "nvidia_container_toolkit"
TOOLKIT_PACKAGES = ("nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools",
                    "libnvidia-container1")
CONTAINERD_DROPIN = """\
version = 2
[plugins."io.containerd.grpc.v1.cri".containerd]
      default_runtime_name = "nvidia"
          [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
            BinaryName = "/usr/bin/nvidia-container-runtime"
"""
CONFIG_WITH_IMPORT = 'version = 2\nimports = ["/etc/containerd/conf.d/*.toml"]\nroot = "/srv/containerd"\n'


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _missing(render, tasks_file: str, fact: str, registered: dict, **overrides):
    task = find_task(ROLE, tasks_file, "Work out what " + {
        "runtime_docker.yml": "daemon.json lacks",
        "runtime_containerd.yml": "the containerd configuration lacks",
        "runtime_crio.yml": "the CRI-O drop-in lacks"}[tasks_file])
    return render(ROLE, task["ansible.builtin.set_fact"][fact], os_vars=None, **task.get("vars", {}),
                  **registered, **overrides)


@pytest.mark.parametrize(
    ("daemon_json", "default", "cdi", "missing"),
    [
        (None, False, False, ["the nvidia runtime"]),
        ({"data-root": "/srv/docker"}, True, False, ["the nvidia runtime", "nvidia as default runtime"]),
        ({"runtimes": {"nvidia": {"path": "nvidia-container-runtime", "args": []}}}, False, False, []),
        ({"runtimes": {"nvidia": {"path": "/usr/bin/nvidia-container-runtime"}}, "default-runtime": "nvidia"},
         True, False, []),
        ({"runtimes": {"nvidia": {"path": "nvidia-container-runtime"}}}, False, True, ["features.cdi"]),
        ({"runtimes": {"nvidia": {"path": "nvidia-container-runtime"}}, "features": {"cdi": True}}, False, True, []),
        ({"runtimes": {"nvidia": {"path": "/opt/other/runtime"}}}, False, False, ["the nvidia runtime"]),
    ],
)
def test_docker_decision(render, daemon_json, default, cdi, missing) -> None:
    raw = {"content": _b64(json.dumps(daemon_json))} if daemon_json is not None else {"skipped": True}
    assert _missing(render, "runtime_docker.yml", "__nvidia_container_toolkit_docker_missing",
                    {"__nvidia_container_toolkit_docker_raw": raw}, nvidia_container_toolkit_set_as_default=default,
                    nvidia_container_toolkit_runtime_cdi=cdi) == missing


@pytest.mark.parametrize(
    ("dropin", "config", "default", "missing"),
    [
        (None, None, False,
         ["the nvidia runtime", "the imports entry in config.toml"]),
        (CONTAINERD_DROPIN, CONFIG_WITH_IMPORT, True, []),
        (CONTAINERD_DROPIN, CONFIG_WITH_IMPORT, False, ["the default runtime setting"]),
        (CONTAINERD_DROPIN, "version = 2\nroot = \"/srv/containerd\"\n", True, ["the imports entry in config.toml"]),
        (CONTAINERD_DROPIN, "version = 2\nimports = ['/etc/other/*.toml', '/etc/containerd/conf.d/*.toml']\n", True,
         []),
    ],
)
def test_containerd_decision(render, dropin, config, default, missing) -> None:
    results = [{"content": _b64(text)} if text is not None else {"failed": True} for text in (dropin, config)]
    assert _missing(render, "runtime_containerd.yml", "__nvidia_container_toolkit_containerd_missing",
                    {"__nvidia_container_toolkit_containerd_raw": {"results": results}},
                    nvidia_container_toolkit_set_as_default=default) == missing


@pytest.mark.parametrize(
    ("dropin", "default", "missing"),
    [
        (None, False, ["the nvidia runtime"]),
        ('runtime_path = "/usr/bin/nvidia-container-runtime"\n', False, []),
        ('runtime_path = "/usr/bin/nvidia-container-runtime"\n', True, ["the default runtime setting"]),
    ],
)
def test_crio_decision(render, dropin, default, missing) -> None:
    raw = {"content": _b64(dropin)} if dropin is not None else {"failed": True}
    assert _missing(render, "runtime_crio.yml", "__nvidia_container_toolkit_crio_missing",
                    {"__nvidia_container_toolkit_crio_raw": raw},
                    nvidia_container_toolkit_set_as_default=default) == missing


@pytest.mark.parametrize(
    ("installed", "change"),
    [
        ({}, True),
        (dict.fromkeys(TOOLKIT_PACKAGES, "1.17.8-1"), False),
        (dict.fromkeys(TOOLKIT_PACKAGES[:3], "1.17.8-1"), True),
        (dict.fromkeys(TOOLKIT_PACKAGES, "1.18.0-1"), True),
    ],
)
def test_package_change_detection(render, installed, change) -> None:
    facts = {"architecture": "x86_64", "packages": {k: [{"version": v}] for k, v in installed.items()}}
    assert render(ROLE, "{{ __nvidia_container_toolkit_change_needed }}", os_vars=None,
                  ansible_facts=facts) is change


@pytest.mark.parametrize(
    ("version", "runtimes", "ok"),
    [("1.17.8-1", ["docker"], True), ("1.17.8-1", ["docker", "containerd"], False), ("1.18.0-1", ["crio"], True),
     ("1.17.8-1", ["crio"], False), ("1.17.8-1", [], True)],
)
def test_drop_ins_need_toolkit_118(render, version, runtimes, ok) -> None:
    task = find_task(ROLE, "preflight.yml", "Check that containerd and CRI-O can take a drop-in")
    condition = "{{ " + task["ansible.builtin.assert"]["that"][0] + " }}"
    assert render(ROLE, condition, os_vars=None, nvidia_container_toolkit_version=version,
                  __nvidia_container_toolkit_runtimes=runtimes, **task["vars"]) is ok
