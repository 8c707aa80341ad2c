"""The signed flat apt repository: indexes, signatures (gpgv), PEP 503 index, and the 127.0.0.1 server."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request
import zipfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from _toolkit import free_port

from gpufleet_sim import packaging, repo


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("repo")
    pool = root / "repo" / "pool"
    for pkg in packaging.toolkit_packages("1.18.0")[:2]:
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
