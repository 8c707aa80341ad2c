"""The signed flat apt repository: indexes, signatures (gpgv), PEP 503 index, and the 127.0.0.1 server."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import urllib.request
import zipfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).parent))
from _toolkit import free_port

from gpufleet_sim import packaging, repo

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("repo")
    pool = root / "repo" / "pool"
    pinning = packaging.Package("nvidia-driver-pinning-570", "570.172.08-1", "pin", arch="all",
                                files={"/etc/apt/preferences.d/nvidia-driver-pinning-570": b"Pin\n"})
    for pkg in [*packaging.toolkit_packages("1.18.0")[:2], pinning]:
        packaging.build_deb(packaging.stage(pkg, root / "stage"), pool)
    wheel = root / "nvidia_ml_py-13.615.71-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("pynvml.py", "# test\n")
    repo.build_repo(root / "repo", root / "gnupg", wheel)
    return root


def gpgv(keyring: Path, *files: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["gpgv", "--keyring", str(keyring), *map(str, files)], capture_output=True, text=True,
                          check=False)


def test_indexes_and_signatures(built: Path) -> None:
    r = built / "repo"
    packages = (r / "Packages").read_text()
    assert "Package: libnvidia-container1\nVersion: 1.18.0-1\n" in packages
    assert "Filename: pool/libnvidia-container-tools_1.18.0-1_amd64.deb\n" in packages
    release = (r / "Release").read_text()
    assert "Origin: gpusim\n" in release
    assert " Packages.gz\n" in release
    assert gpgv(r / repo.KEYRING, r / "InRelease").returncode == 0
    assert gpgv(r / repo.KEYRING, r / "Release.gpg", r / "Release").returncode == 0
    assert (r / repo.KEYRING_ASC).read_text().startswith("-----BEGIN PGP PUBLIC KEY BLOCK-----")


def test_tampered_release_fails(built: Path, tmp_path: Path) -> None:
    r = built / "repo"
    tampered = tmp_path / "Release"
    tampered.write_text((r / "Release").read_text() + "Suite: evil\n")
    result = gpgv(r / repo.KEYRING, r / "Release.gpg", tampered)
    assert result.returncode != 0
    assert "BAD signature" in result.stderr


def test_serve_and_stop(built: Path) -> None:
    port = free_port()
    pid = repo.serve(built / "repo", "127.0.0.1", port, build_dir=built)
    try:
        assert int((built / repo.PID_FILE).read_text()) == pid
        with pytest.raises(repo.RepoError, match=f"already runs with pid {pid}"):
            repo.serve(built / "repo", "127.0.0.1", port, build_dir=built)
        base = f"http://127.0.0.1:{port}"
        with urllib.request.urlopen(f"{base}/InRelease", timeout=10) as response:
            assert response.read() == (built / "repo" / "InRelease").read_bytes()
        with urllib.request.urlopen(f"{base}/pypi/simple/nvidia-ml-py/", timeout=10) as response:
            page = response.read().decode()
        assert '<a href="../../files/nvidia_ml_py-13.615.71-py3-none-any.whl#sha256=' in page
    finally:
        assert repo.stop(built) is True
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert not (built / repo.PID_FILE).exists()
    assert repo.stop(built) is False


def test_build_repo_without_packages(tmp_path: Path) -> None:
    with pytest.raises(repo.RepoError, match="no packages in"):
        repo.build_repo(tmp_path / "empty", tmp_path / "gnupg")


# NVIDIA's layout: compute/cuda/repos/<distro>/<arch>/ -------------------------------------------------------------
NVIDIA = "compute/cuda/repos"
TREE = [(d, a) for d in ("debian12", "ubuntu2204", "ubuntu2404") for a in ("x86_64", "sbsa")]


def _field(stanzas: str, field: str) -> list[str]:
    return re.findall(rf"^{field}: (.*)$", stanzas, re.MULTILINE)


@pytest.mark.parametrize(("distro", "arch"), TREE)
def test_nvidia_tree_repositories_are_flat_signed_and_linked_to_the_pool(built: Path, distro: str,
                                                                         arch: str) -> None:
    r = built / "repo"
    folder = r / NVIDIA / distro / arch
    assert gpgv(r / repo.KEYRING, folder / "InRelease").returncode == 0
    assert gpgv(r / repo.KEYRING, folder / "Release.gpg", folder / "Release").returncode == 0
    packages = (folder / "Packages").read_text()
    expected = {"cuda-keyring", "nvidia-driver-pinning-570"}
    if arch == "x86_64":
        expected |= {"libnvidia-container1", "libnvidia-container-tools"}
    assert set(_field(packages, "Package")) == expected
    for filename in _field(packages, "Filename"):
        assert re.fullmatch(r"\./[^/]+\.deb", filename), filename  # flat, as NVIDIA's indexes
        deb = folder / filename
        if not filename.startswith("./cuda-keyring_"):
            assert deb.is_symlink()
            assert deb.resolve() == (r / "pool" / deb.name).resolve()
    assert "Architectures: " + ("amd64" if arch == "x86_64" else "arm64") + " all\n" in (folder / "Release").read_text()
    # The key under NVIDIA's file name, armoured like NVIDIA's 3bf863cc.pub.
    assert (folder / "3bf863cc.pub").read_bytes() == (r / repo.KEYRING_ASC).read_bytes()


@pytest.mark.parametrize(("distro", "arch"), [("debian12", "x86_64"), ("ubuntu2404", "sbsa")])
def test_cuda_keyring_installs_the_key_and_a_source_for_its_own_repository(built: Path, tmp_path: Path,
                                                                            distro: str, arch: str) -> None:
    r = built / "repo"
    deb = r / NVIDIA / distro / arch / "cuda-keyring_1.1-1_all.deb"
    subprocess.run(["dpkg-deb", "-x", str(deb), str(tmp_path)], check=True)
    files = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert files == [f"etc/apt/sources.list.d/cuda-{distro}-{arch}.list",
                     "usr/share/keyrings/cuda-archive-keyring.gpg"]
    assert (tmp_path / "usr/share/keyrings/cuda-archive-keyring.gpg").read_bytes() == (r / repo.KEYRING).read_bytes()
    assert (tmp_path / f"etc/apt/sources.list.d/cuda-{distro}-{arch}.list").read_text() == (
        "deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] "
        f"http://127.0.0.1:8765/compute/cuda/repos/{distro}/{arch}/ /\n")
    control = subprocess.run(["dpkg-deb", "-f", str(deb), "Package", "Version", "Architecture"],
                             capture_output=True, text=True, check=True).stdout
    assert control == "Package: cuda-keyring\nVersion: 1.1-1\nArchitecture: all\n"


def test_flat_repository_at_the_root_is_unchanged_by_the_tree(built: Path) -> None:
    r = built / "repo"
    assert "compute/" not in (r / "Release").read_text()
    assert set(_field((r / "Packages").read_text(), "Filename")) == {
        f"pool/{deb.name}" for deb in (r / "pool").glob("*.deb")}


def test_a_rebuild_lays_the_tree_out_again(built: Path) -> None:
    folder = built / "repo" / NVIDIA / "debian12" / "x86_64"
    (folder / "stale_1_all.deb").write_bytes(b"left over")
    repo.build_repo(built / "repo", built / "gnupg")
    assert not (folder / "stale_1_all.deb").exists()
    assert gpgv(built / "repo" / repo.KEYRING, folder / "InRelease").returncode == 0


def test_the_tree_covers_what_the_driver_role_derives() -> None:
    """Every <distro> of roles/nvidia_driver/vars and both <arch> it maps to, with the key file it expects."""
    role_vars = {f.name: f.read_text() for f in (ROOT / "roles/nvidia_driver/vars").glob("*-*.yml")}
    distros = {re.search(r"^__nvidia_driver_cuda_distro: (\S+)$", t, re.MULTILINE).group(1)  # type: ignore[union-attr]
               for t in role_vars.values()}
    key_files = {re.search(r"^__nvidia_driver_default_key_file: (\S+)$", t, re.MULTILINE).group(1)  # type: ignore[union-attr]
                 for t in role_vars.values()}
    assert distros == {"debian12", "ubuntu2204", "ubuntu2404"}
    assert set(repo.NVIDIA_REPOS) == {(d, a) for d in distros for a in ("x86_64", "sbsa")}
    assert key_files == {repo.NVIDIA_KEY_FILE}


@given(distro=st.from_regex(r"[a-z]{3,8}[0-9]{2,4}", fullmatch=True), arch=st.sampled_from(["x86_64", "sbsa"]),
       host=st.from_regex(r"[a-z0-9]{1,12}(\.[a-z0-9]{1,8}){0,2}", fullmatch=True),
       port=st.integers(min_value=1, max_value=65535), keyring=st.binary(min_size=1, max_size=64))
def test_cuda_keyring_package_names_its_own_repository(distro: str, arch: str, host: str, port: int,
                                                       keyring: bytes) -> None:
    url = f"http://{host}:{port}/compute/cuda/repos/{distro}/{arch}/"
    pkg = packaging.cuda_keyring_package(distro, arch, url, keyring)
    source = f"/etc/apt/sources.list.d/cuda-{distro}-{arch}.list"
    assert (pkg.name, pkg.version, pkg.arch) == ("cuda-keyring", "1.1-1", "all")
    assert pkg.files == {"/usr/share/keyrings/cuda-archive-keyring.gpg": keyring,
                         source: f"deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] {url} /\n".encode()}
    assert pkg.conffiles == [source]
