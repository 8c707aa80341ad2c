"""The simulator's signed flat apt repository (laid out like NVIDIA's CUDA repository) and its web server.

``build_repo`` indexes ``<repo>/pool/*.deb`` (``dpkg-scanpackages --multiversion``), writes ``Release`` with
``apt-ftparchive``, signs it (``InRelease`` + ``Release.gpg``) with a key kept in a throw-away ``GNUPGHOME`` under
the build folder, exports the public key (``gpusim-archive-keyring.gpg`` binary, ``.asc`` armoured), and adds a
PEP 503 index ``pypi/simple/nvidia-ml-py/`` with the pinned wheel so hosts can install the bindings from it too.
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
import time
from pathlib import Path

KEY_UID = "gpusim archive signing key <gpusim@example.invalid>"
KEYRING = "gpusim-archive-keyring.gpg"
KEYRING_ASC = "gpusim-archive-keyring.asc"
PID_FILE = "repo-server.pid"
DEFAULT_PORT = 8765


class RepoError(RuntimeError):
    """The repository could not be built, signed or served (the message carries the tool's output)."""


def _run(cmd: list[str], cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RepoError(f"{' '.join(cmd)} failed (exit {proc.returncode}):\n{proc.stdout}{proc.stderr}")
    return proc.stdout


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


def build_repo(repo: Path, gnupg_home: Path, wheel: Path | None = None) -> dict[str, Path]:
    """Index, sign and publish the key of the repository in ``repo`` (debs already in ``repo/pool``)."""
    repo = repo.resolve()
    if not any((repo / "pool").glob("*.deb")):
        raise RepoError(f"no packages in {repo / 'pool'}: build them first")
    packages = _run(["dpkg-scanpackages", "--multiversion", "pool", "/dev/null"], cwd=repo)
    (repo / "Packages").write_text(packages, encoding="utf-8")
    with gzip.GzipFile(repo / "Packages.gz", "wb", mtime=0) as handle:
        handle.write(packages.encode())
    for stale in ("Release", "InRelease", "Release.gpg"):
        (repo / stale).unlink(missing_ok=True)
    release = _run(["apt-ftparchive", "-o", "APT::FTPArchive::Release::Origin=gpusim",
                    "-o", "APT::FTPArchive::Release::Label=gpusim simulated NVIDIA stack",
                    "-o", "APT::FTPArchive::Release::Architectures=amd64 all", "release", "."], cwd=repo)
    (repo / "Release").write_text(release, encoding="utf-8")
    env = _gpg_env(gnupg_home)
    try:
        fingerprint = ensure_key(gnupg_home)
        _run(["gpg", "--batch", "--yes", "--local-user", fingerprint, "--clearsign", "-o", "InRelease", "Release"],
             cwd=repo, env=env)
        _run(["gpg", "--batch", "--yes", "--local-user", fingerprint, "--armor", "--detach-sign", "-o",
              "Release.gpg", "Release"], cwd=repo, env=env)
        binary = subprocess.run(["gpg", "--batch", "--export", fingerprint], env=env, capture_output=True,
                                check=True).stdout
        (repo / KEYRING).write_bytes(binary)
        (repo / KEYRING_ASC).write_text(_run(["gpg", "--batch", "--armor", "--export", fingerprint], env=env),
                                        encoding="ascii")
    finally:
        stop_agent(gnupg_home)
    result = {"Packages": repo / "Packages", "Release": repo / "Release", "InRelease": repo / "InRelease",
              "Release.gpg": repo / "Release.gpg", "keyring": repo / KEYRING, "keyring_asc": repo / KEYRING_ASC}
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
