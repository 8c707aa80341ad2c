"""nvidia-ctk: runtime configuration merges into existing files and is idempotent; CDI specs from NVML."""

from __future__ import annotations

import json
import sys
import tomllib
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from _toolkit import build_lib, make_state, run_tool, tool_env, write_state

from gpufleet_sim import store
from gpufleet_sim.tools import nvidia_ctk

CONTAINERD_EXISTING = """version = 2
root = "/var/lib/containerd"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  SystemdCgroup = true
"""


@pytest.fixture(scope="module")
def libdir() -> Path:
    return build_lib()


def ctk(env: dict[str, str], *args: str) -> object:
    return run_tool("nvidia_ctk", list(args), env)


@pytest.fixture
def env(tmp_path: Path, libdir: Path) -> dict[str, str]:
    state = write_state(tmp_path / "state.json", make_state(2))
    return tool_env(state, libdir, NVIDIA_SIM_ROOT=str(tmp_path / "root"))


def test_docker_merge_keeps_keys_and_is_idempotent(tmp_path: Path, env: dict[str, str]) -> None:
    config = tmp_path / "daemon.json"
    config.write_text(json.dumps({"log-driver": "journald", "runtimes": {"crun": {"path": "/usr/bin/crun"}}}))
    first = ctk(env, "runtime", "configure", "--runtime=docker", "--set-as-default", f"--config={config}")
    assert first.returncode == 0, first.stderr
    assert first.stderr == (f"INFO[0000] Wrote updated config to {config}\n"
                            "INFO[0000] It is recommended that docker daemon be restarted.\n")
    content = config.read_bytes()
    assert json.loads(content) == {"default-runtime": "nvidia", "log-driver": "journald",
                                   "runtimes": {"crun": {"path": "/usr/bin/crun"},
                                                "nvidia": {"args": [], "path": "nvidia-container-runtime"}}}
    ctk(env, "runtime", "configure", "--runtime=docker", "--set-as-default", f"--config={config}")
    assert config.read_bytes() == content


def test_docker_rejects_broken_json(tmp_path: Path, env: dict[str, str]) -> None:
    config = tmp_path / "daemon.json"
    config.write_text("{broken")
    result = ctk(env, "runtime", "configure", "--runtime=docker", f"--config={config}")
    assert result.returncode == 1
    assert result.stderr.startswith("unable to load config for runtime docker: unable to parse config:")
    assert config.read_text() == "{broken"


def test_containerd_dropin_and_imports(tmp_path: Path, env: dict[str, str]) -> None:
    config = tmp_path / "containerd" / "config.toml"
    config.parent.mkdir()
    config.write_text(CONTAINERD_EXISTING)
    args = ["runtime", "configure", "--runtime=containerd", "--set-as-default", "--cdi.enabled", f"--config={config}"]
    assert ctk(env, *args).returncode == 0
    dropin = config.parent / "conf.d" / "99-nvidia.toml"
    main_text, dropin_text = config.read_text(), dropin.read_text()
    merged = tomllib.loads(main_text)
    assert merged["imports"] == [f"{config.parent}/conf.d/*.toml"]
    assert merged["root"] == "/var/lib/containerd"
    assert main_text.replace(f'imports = ["{config.parent}/conf.d/*.toml"]\n', "") == CONTAINERD_EXISTING
    cri = tomllib.loads(dropin_text)["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["enable_cdi"] is True
    assert cri["containerd"]["default_runtime_name"] == "nvidia"
    assert cri["containerd"]["runtimes"]["nvidia"]["options"] == {
        "BinaryName": "/usr/bin/nvidia-container-runtime", "SystemdCgroup": True}
    ctk(env, *args)
    assert (config.read_text(), dropin.read_text()) == (main_text, dropin_text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 'version = 2\nimports = ["/etc/containerd/conf.d/*.toml"]\n'),
        ('version = 3\nimports = ["/a.toml"]\n',
         'version = 3\nimports = ["/a.toml", "/etc/containerd/conf.d/*.toml"]\n'),
        ('imports = ["/etc/containerd/conf.d/*.toml"]\n', 'imports = ["/etc/containerd/conf.d/*.toml"]\n'),
        ('root = "/x"\n', 'imports = ["/etc/containerd/conf.d/*.toml"]\nroot = "/x"\n'),
    ],
)
def test_add_import(text: str, expected: str) -> None:
    assert nvidia_ctk.add_import(text, "/etc/containerd/conf.d/*.toml", 2) == expected


def test_crio_dropin(tmp_path: Path, env: dict[str, str]) -> None:
    config = tmp_path / "crio" / "crio.conf"
    assert ctk(env, "runtime", "configure", "--runtime=crio", f"--config={config}").returncode == 0
    doc = tomllib.loads((config.parent / "crio.conf.d" / "99-nvidia.toml").read_text())
    assert doc["crio"]["runtime"]["runtimes"]["nvidia"]["runtime_path"] == "/usr/bin/nvidia-container-runtime"
    assert not config.exists()


def test_cdi_generate_and_list(tmp_path: Path, env: dict[str, str]) -> None:
    state = Path(env["NVML_SIM_STATE"])
    doc = store.load(state)
    doc["gpus"][1]["mig"].update(current=1, pending=1, gpu_instances=[
        {"id": 1, "profile_id": 9, "start": 0, "size": 4,
         "compute_instances": [{"id": 0, "profile_id": 2, "start": 0, "size": 3,
                                "uuid": "MIG-8d4c2a4e-3c1e-5b8a-9f7e-2a1b3c4d5e6f"}]}])
    store.create(state, doc)
    spec_path = Path(env["NVIDIA_SIM_ROOT"]) / "var/run/cdi/nvidia.json"
    result = ctk(env, "cdi", "generate", f"--output={spec_path}")
    assert result.returncode == 0, result.stderr
    spec = json.loads(spec_path.read_text())
    assert (spec["cdiVersion"], spec["kind"]) == ("0.5.0", "nvidia.com/gpu")
    names = [d["name"] for d in spec["devices"]]
    assert names[:2] == ["0", doc["gpus"][0]["uuid"]]
    assert "1:0" in names
    assert names[-1] == "all"
    assert spec["devices"][0]["containerEdits"]["deviceNodes"] == [{"path": "/dev/nvidia0"}]
    yaml_path = Path(env["NVIDIA_SIM_ROOT"]) / "etc/cdi/nvidia.yaml"
    assert ctk(env, "cdi", "generate", f"--output={yaml_path}").returncode == 0
    assert yaml_path.read_text().startswith("---\ncdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: \"0\"\n")
    listed = ctk(env, "cdi", "list")
    expected = [f"nvidia.com/gpu={n}" for n in names]
    assert listed.stdout.splitlines() == expected + expected
    assert listed.stderr == f"INFO[0000] Found {2 * len(names)} CDI devices\n"


def test_version(env: dict[str, str]) -> None:
    result = ctk({**env, "GPUSIM_TOOL_VERSION": "1.17.8"}, "--version")
    assert result.stdout.splitlines()[0] == "NVIDIA Container Toolkit CLI version 1.17.8"
