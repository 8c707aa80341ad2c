"""The simulator's signed flat apt repository (laid out like NVIDIA's CUDA repository) and its web server.

``build_repo`` indexes ``<repo>/pool/*.deb`` (``dpkg-scanpackages --multiversion``), writes ``Release`` with
``apt-ftparchive``, signs it (``InRelease`` + ``Release.gpg``) with a key kept in a throw-away ``GNUPGHOME`` under
the build folder, exports the public key (``gpusim-archive-keyring.gpg`` binary, ``.asc`` armoured), and adds a
PEP 503 index ``pypi/simple/nvidia-ml-py/`` with the pinned wheel so hosts can install the bindings from it too.

It also serves NVIDIA's own layout, ``compute/cuda/repos/<distro>/<arch>/`` (:data:`NVIDIA_REPOS`): one flat,
signed repository per directory, as on ``developer.download.nvidia.com``, each with its packages (symbolic links
into ``pool/``, nothing copied), the key under NVIDIA's file name (:data:`NVIDIA_KEY_FILE`, armoured) and a
``cuda-keyring_<ver>_all.deb`` whose apt source points at the simulated server. The simulated driver is built for
x86_64 only: the ``sbsa`` directories carry the architecture-independent packages (pinning, keyring) and no driver.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import html
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

KEY_UID = "gpusim archive signing key <gpusim@example.invalid>"
KEYRING = "gpusim-archive-keyring.gpg"
KEYRING_ASC = "gpusim-archive-keyring.asc"
PID_FILE = "repo-server.pid"
DEFAULT_PORT = 8765
DEFAULT_SERVER = f"http://127.0.0.1:{DEFAULT_PORT}"
#: NVIDIA's CUDA repository tree and the repositories of it that the roles use: (distro, arch) -> Debian arch.
NVIDIA_TREE = "compute/cuda/repos"
NVIDIA_REPOS: dict[tuple[str, str], str] = {
    (distro, arch): deb_arch for distro in ("debian12", "ubuntu2204", "ubuntu2404")
    for arch, deb_arch in (("x86_64", "amd64"), ("sbsa", "arm64"))}
#: The key file in each of NVIDIA's repositories (NVIDIA's key 3bf863cc; here the simulated key under that name).
NVIDIA_KEY_FILE = "3bf863cc.pub"


class RepoError(RuntimeError):
    """The repository could not be built, signed or served (the message carries the tool's output)."""


def _run(cmd: list[str], cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RepoError(f"{' '.join(cmd)} failed (exit {proc.returncode}):\n{proc.stdout}{proc.stderr}")
    return proc.stdout


def key_fingerprint(key: Path, gnupg_home: Path) -> str:
    """The fingerprint of the one key in the file ``key`` (binary or armoured), read with gpg in ``gnupg_home``."""
    out = subprocess.run(["gpg", "--batch", "--homedir", str(gnupg_home), "--show-keys", "--with-colons", str(key)],
                         capture_output=True, text=True, check=True).stdout
    found = [line.split(":")[9] for line in out.splitlines() if line.startswith("fpr:")]
    if not found:
        raise RepoError(f"{key} holds no OpenPGP key gpg can read")
    return found[0]


def _gpg_env(gnupg_home: Path) -> dict[str, str]:
    gnupg_home = gnupg_home.resolve()
    gnupg_home.mkdir(parents=True, exist_ok=True)
    gnupg_home.chmod(0o700)
    return {**os.environ, "GNUPGHOME": str(gnupg_home), "LC_ALL": "C"}


def ensure_key(gnupg_home: Path) -> str:
    """Create the signing key once (ed25519, no passphrase); return its fingerprint."""
    env = _gpg_env(gnupg_home)
    listing = subprocess.run(["gpg", "--batch", "--with-colons", "--list-secret-keys", KEY_UID], env=env,
                             capture_output=True, text=True, check=False).stdout
    if "fpr:" not in listing:
        _run(["gpg", "--batch", "--passphrase", "", "--quick-gen-key", KEY_UID, "ed25519", "sign", "never"], env=env)
        listing = _run(["gpg", "--batch", "--with-colons", "--list-secret-keys", KEY_UID], env=env)
    return next(line.split(":")[9] for line in listing.splitlines() if line.startswith("fpr:"))


def stop_agent(gnupg_home: Path) -> None:
    """Stop the gpg-agent (and any other gpg daemon) started for ``gnupg_home``."""
    subprocess.run(["gpgconf", "--kill", "all"], env=_gpg_env(gnupg_home), capture_output=True, check=False)


def write_pypi_index(repo: Path, wheel: Path) -> Path:
    """A PEP 503 simple index with the pinned nvidia-ml-py wheel; return the project page."""
    files = repo / "pypi" / "files"
    files.mkdir(parents=True, exist_ok=True)
    target = files / wheel.name
    shutil.copyfile(wheel, target)
    digest = hashlib.sha256(target.read_bytes()).hexdigest()
    simple = repo / "pypi" / "simple"
    project = simple / "nvidia-ml-py"
    project.mkdir(parents=True, exist_ok=True)
    (simple / "index.html").write_text(
        '<!DOCTYPE html>\n<html><body>\n<a href="nvidia-ml-py/">nvidia-ml-py</a>\n</body></html>\n', encoding="utf-8")
    page = project / "index.html"
    page.write_text(
        "<!DOCTYPE html>\n<html><body>\n"
        f'<a href="../../files/{html.escape(wheel.name)}#sha256={digest}">{html.escape(wheel.name)}</a>\n'
        "</body></html>\n", encoding="utf-8")
    return page


def _release(folder: Path, architectures: str) -> str:
    return _run(["apt-ftparchive", "-o", "APT::FTPArchive::Release::Origin=gpusim",
                 "-o", "APT::FTPArchive::Release::Label=gpusim simulated NVIDIA stack",
                 "-o", f"APT::FTPArchive::Release::Architectures={architectures}", "release", "."], cwd=folder)


def _sign(folder: Path, fingerprint: str, env: dict[str, str]) -> None:
    """``InRelease`` (clear-signed) and ``Release.gpg`` (detached) for ``folder/Release``."""
    _run(["gpg", "--batch", "--yes", "--local-user", fingerprint, "--clearsign", "-o", "InRelease", "Release"],
         cwd=folder, env=env)
    _run(["gpg", "--batch", "--yes", "--local-user", fingerprint, "--armor", "--detach-sign", "-o",
          "Release.gpg", "Release"], cwd=folder, env=env)


def _index(folder: Path) -> None:
    packages = _run(["dpkg-scanpackages", "--multiversion", ".", "/dev/null"], cwd=folder)
    (folder / "Packages").write_text(packages, encoding="utf-8")
    with gzip.GzipFile(folder / "Packages.gz", "wb", mtime=0) as handle:
        handle.write(packages.encode())


def build_nvidia_tree(repo: Path, fingerprint: str, env: dict[str, str], keyring: bytes,
                      server_url: str = DEFAULT_SERVER) -> dict[tuple[str, str], Path]:
    """Lay out ``repo/compute/cuda/repos/<distro>/<arch>/`` (:data:`NVIDIA_REPOS`) as signed flat repositories.

    Each gets links to the ``pool/`` packages of its architecture (and ``all``), the armoured key as
    :data:`NVIDIA_KEY_FILE`, and its own ``cuda-keyring`` package whose source names
    ``<server_url>/compute/cuda/repos/<distro>/<arch>/``. Returns the folder of each repository.
    """
    from . import packaging

    pool = sorted((repo / "pool").glob("*.deb"))
    folders: dict[tuple[str, str], Path] = {}
    with tempfile.TemporaryDirectory(prefix="gpusim-keyring-") as stage_dir:
        for (distro, arch), deb_arch in NVIDIA_REPOS.items():
            folder = repo / NVIDIA_TREE / distro / arch
            folder.mkdir(parents=True)
            for deb in pool:
                if deb.name.endswith((f"_{deb_arch}.deb", "_all.deb")):
                    (folder / deb.name).symlink_to(os.path.relpath(deb, folder))
            (folder / NVIDIA_KEY_FILE).symlink_to(os.path.relpath(repo / KEYRING_ASC, folder))
            url = f"{server_url.rstrip('/')}/{NVIDIA_TREE}/{distro}/{arch}/"
            keyring_pkg = packaging.cuda_keyring_package(distro, arch, url, keyring)
            packaging.build_deb(packaging.stage(keyring_pkg, Path(stage_dir) / distro / arch), folder)
            _index(folder)
            (folder / "Release").write_text(_release(folder, f"{deb_arch} all"), encoding="utf-8")
            _sign(folder, fingerprint, env)
            folders[(distro, arch)] = folder
    return folders


def build_repo(repo: Path, gnupg_home: Path, wheel: Path | None = None,
               server_url: str = DEFAULT_SERVER) -> dict[str, Path]:
    """Index, sign and publish the key of the repository in ``repo`` (debs already in ``repo/pool``).

    ``server_url`` is where the repository will be served: the ``cuda-keyring`` packages' sources name it.
    """
    repo = repo.resolve()
    if not any((repo / "pool").glob("*.deb")):
        raise RepoError(f"no packages in {repo / 'pool'}: build them first")
    packages = _run(["dpkg-scanpackages", "--multiversion", "pool", "/dev/null"], cwd=repo)
    (repo / "Packages").write_text(packages, encoding="utf-8")
    with gzip.GzipFile(repo / "Packages.gz", "wb", mtime=0) as handle:
        handle.write(packages.encode())
    for stale in ("Release", "InRelease", "Release.gpg"):
        (repo / stale).unlink(missing_ok=True)
    # The tree is made again below; gone first so that the flat repository's Release does not index it.
    shutil.rmtree(repo / NVIDIA_TREE.split("/")[0], ignore_errors=True)
    (repo / "Release").write_text(_release(repo, "amd64 all"), encoding="utf-8")
    env = _gpg_env(gnupg_home)
    try:
        fingerprint = ensure_key(gnupg_home)
        _sign(repo, fingerprint, env)
        binary = subprocess.run(["gpg", "--batch", "--export", fingerprint], env=env, capture_output=True,
                                check=True).stdout
        (repo / KEYRING).write_bytes(binary)
        (repo / KEYRING_ASC).write_text(_run(["gpg", "--batch", "--armor", "--export", fingerprint], env=env),
                                        encoding="ascii")
        tree = build_nvidia_tree(repo, fingerprint, env, binary, server_url)
    finally:
        stop_agent(gnupg_home)
    result = {"Packages": repo / "Packages", "Release": repo / "Release", "InRelease": repo / "InRelease",
              "Release.gpg": repo / "Release.gpg", "keyring": repo / KEYRING, "keyring_asc": repo / KEYRING_ASC,
              **{f"{NVIDIA_TREE}/{distro}/{arch}": path for (distro, arch), path in tree.items()}}
    if wheel is not None:
        result["pypi"] = write_pypi_index(repo, wheel)
    return result


def _pid_path(build_dir: Path) -> Path:
    return build_dir / PID_FILE


def serve(repo_dir: Path, host: str = "127.0.0.1", port: int = DEFAULT_PORT, build_dir: Path = Path("build"),
          timeout: float = 10.0) -> int:
    """Serve ``repo_dir`` with ``python -m http.server`` in a new session; write the PID file; return the pid.

    Raises:
        RepoError: a server of ours is already running, or the new one does not accept connections in time.
    """
    pid_file = _pid_path(build_dir)
    running = _alive_pid(pid_file)
    if running:
        raise RepoError(f"a repository server already runs with pid {running} ({pid_file}); stop it first")
    build_dir.mkdir(parents=True, exist_ok=True)
    with (build_dir / "repo-server.log").open("ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", host, "--directory",
                                 str(Path(repo_dir).resolve())], stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    pid_file.write_text(f"{proc.pid}\n", encoding="ascii")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pid_file.unlink(missing_ok=True)
            raise RepoError(f"the repository server exited with status {proc.returncode}; "
                            f"see {build_dir / 'repo-server.log'}")
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.5):
            return proc.pid
        time.sleep(0.1)
    stop(build_dir)
    raise RepoError(f"the repository server did not listen on {host}:{port} within {timeout:.0f}s")


def _alive_pid(pid_file: Path) -> int | None:
    try:
        pid = int(pid_file.read_text(encoding="ascii").strip())
    except (OSError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    return pid


def stop(build_dir: Path = Path("build"), timeout: float = 5.0) -> bool:
    """Stop the server recorded in the PID file (SIGTERM, then SIGKILL); return whether one was running."""
    pid_file = _pid_path(build_dir)
    pid = _alive_pid(pid_file)
    pid_file.unlink(missing_ok=True)
    if pid is None:
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    return True
