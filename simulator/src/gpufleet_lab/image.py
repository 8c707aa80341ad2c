"""Build the test-host image: a Debian 12 minbase root file system with systemd as PID 1.

The root file system is made by ``debootstrap``, given fresh apt lists, packed as ``build/lab/testhost.tar.zst``
and imported into podman as ``localhost/gpufleet-testhost:bookworm``. Both the tarball and the image carry a
hash of the recipe; nothing is rebuilt while the recipe is unchanged.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gpufleet_lab.podman import PodmanError, build_dir, podman

LOG = logging.getLogger(__name__)

IMAGE = "localhost/gpufleet-testhost:bookworm"
RECIPE_LABEL = "gpufleet.recipe"
DEFAULT_MIRROR = "http://deb.debian.org/debian"

#: Packages baked into the image. ``python3-apt`` spares Ansible's apt modules an install per host and run;
#: ``libcjson1`` is the one Debian dependency of the simulated ``libnvidia-ml1`` (installs then need no mirror);
#: ``python3-debian`` is what ``ansible.builtin.deb822_repository`` needs on the target; the RDMA user space the
#: gpu_rdma role installs (``rdma-core``, ``infiniband-diags``: the real ``ibstat``/``ibstatus`` read the simulated
#: HCAs; ``ibverbs-utils``, ``perftest``) is baked in so that its install needs no mirror in a test.
PACKAGES: tuple[str, ...] = (
    "systemd", "systemd-sysv", "dbus", "python3", "python3-apt", "python3-venv", "iproute2", "ca-certificates",
    "sudo", "procps", "gnupg", "curl", "kmod", "pciutils", "libcjson1", "python3-debian",
    "rdma-core", "infiniband-diags", "ibverbs-utils", "perftest",
)

#: apt configuration written into the image: no translation downloads (the flat repo has none).
APT_CONF = 'Acquire::Languages "none";\n'


@dataclass(frozen=True)
class Recipe:
    """Everything that decides the image's content; its hash keys the cache."""

    suite: str = "bookworm"
    variant: str = "minbase"
    packages: tuple[str, ...] = PACKAGES
    apt_conf: str = APT_CONF
    #: Bump when the build steps below change what ends up in the image.
    revision: int = 1
    extra: dict[str, str] = field(default_factory=dict)

    def digest(self) -> str:
        """Return a short, stable hash of the recipe."""
        doc = {"suite": self.suite, "variant": self.variant, "packages": sorted(self.packages),
               "apt_conf": self.apt_conf, "revision": self.revision, "extra": dict(sorted(self.extra.items()))}
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]


def debian_mirror(sources: Path = Path("/etc/apt/sources.list.d/debian.sources"),
                  legacy: Path = Path("/etc/apt/sources.list")) -> str:
    """Return the Debian mirror this machine uses (first ``URIs:`` of deb822 sources, else sources.list)."""
    if sources.exists():
        for line in sources.read_text(encoding="utf-8").splitlines():
            if line.startswith("URIs:"):
                return line.split()[1]
    if legacy.exists():
        for line in legacy.read_text(encoding="utf-8").splitlines():
            parts = line.split()
            if len(parts) >= 3 and parts[0] == "deb" and "security" not in parts[1]:
                return parts[2] if parts[1].startswith("[") else parts[1]
    return DEFAULT_MIRROR


def tarball_path() -> Path:
    """Return the cached image tarball path."""
    return build_dir() / "testhost.tar.zst"


def _stamp_path() -> Path:
    return build_dir() / "testhost.recipe"


def tarball_is_current(recipe: Recipe) -> bool:
    """Return whether the cached tarball was built from ``recipe``."""
    stamp = _stamp_path()
    return tarball_path().exists() and stamp.exists() and stamp.read_text(encoding="utf-8").strip() == recipe.digest()


def image_recipe_label(image: str = IMAGE) -> str | None:
    """Return the recipe hash the podman image was imported with, or ``None`` when there is no such image."""
    proc = podman(["image", "inspect", "--format", f'{{{{index .Labels "{RECIPE_LABEL}"}}}}', image], check=False)
    if proc.returncode != 0:
        return None
    return proc.stdout.strip() or None


def _run(cmd: list[str], **kwargs: object) -> None:
    LOG.info("+ %s", " ".join(cmd))
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, **kwargs)  # type: ignore[call-overload]
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-20:])
        raise RuntimeError(f"{cmd[0]} failed (rc {proc.returncode}); last output:\n{tail}")


def build_tarball(recipe: Recipe, mirror: str | None = None) -> Path:
    """Debootstrap the root file system, bake apt lists into it and pack it as the cached tarball."""
    if shutil.which("debootstrap") is None:
        raise RuntimeError("debootstrap is not installed; run scripts/bootstrap.sh (apt-get install debootstrap)")
    mirror = mirror or debian_mirror()
    rootfs = build_dir() / "rootfs"
    if rootfs.exists():
        shutil.rmtree(rootfs)
    _run(["debootstrap", f"--variant={recipe.variant}", f"--include={','.join(recipe.packages)}",
          recipe.suite, str(rootfs), mirror])
    (rootfs / "etc/apt/apt.conf.d/90gpufleet-lab").write_text(recipe.apt_conf, encoding="utf-8")
    resolv = rootfs / "etc/resolv.conf"
    resolv.unlink(missing_ok=True)
    shutil.copyfile("/etc/resolv.conf", resolv)
    try:
        _run(["chroot", str(rootfs), "apt-get", "-qq", "update"])
        _run(["chroot", str(rootfs), "apt-get", "clean"])
    finally:
        resolv.write_text("", encoding="utf-8")
    (rootfs / "etc/machine-id").write_text("", encoding="utf-8")
    (rootfs / "var/lib/dbus/machine-id").unlink(missing_ok=True)
    partial = tarball_path().with_suffix(".partial")
    _run(["tar", "-C", str(rootfs), "--numeric-owner", "-I", "zstd -T0 -3", "-cf", str(partial), "."])
    partial.replace(tarball_path())
    _stamp_path().write_text(recipe.digest() + "\n", encoding="utf-8")
    shutil.rmtree(rootfs)
    return tarball_path()


def import_image(recipe: Recipe, image: str = IMAGE) -> None:
    """Import the cached tarball into podman as ``image``, labelled with the recipe hash."""
    podman(["import", "--quiet",
            "--change", 'CMD ["/sbin/init"]',
            "--change", "ENV container=podman",
            "--change", "STOPSIGNAL SIGRTMIN+3",
            "--change", f"LABEL {RECIPE_LABEL}={recipe.digest()}",
            str(tarball_path()), image], timeout=600)


@dataclass
class BuildReport:
    """What :func:`ensure_image` did and how long each step took (seconds)."""

    digest: str
    built_tarball: bool = False
    imported: bool = False
    tarball_s: float = 0.0
    import_s: float = 0.0


def ensure_image(recipe: Recipe | None = None, *, force: bool = False, image: str = IMAGE) -> BuildReport:
    """Make sure ``image`` exists and matches ``recipe``; rebuild/import only what is out of date."""
    recipe = recipe or Recipe()
    report = BuildReport(digest=recipe.digest())
    if force or not tarball_is_current(recipe):
        start = time.monotonic()
        build_tarball(recipe)
        report.built_tarball = True
        report.tarball_s = time.monotonic() - start
    if force or report.built_tarball or image_recipe_label(image) != recipe.digest():
        start = time.monotonic()
        import_image(recipe, image)
        report.imported = True
        report.import_s = time.monotonic() - start
    return report


#: Prepared images: a test host after a converge (e.g. the node baseline), committed so that scenarios whose
#: subject is another role start from it instead of installing the baseline again. Tagged ``<name>-<digest>``.
PREPARED_IMAGE = "localhost/gpufleet-testhost-prepared"


def tree_digest(paths: Sequence[Path], extra: Mapping[str, str] | None = None, base: Path | None = None) -> str:
    """Return a short hash of every file under ``paths`` (relative name and content) and of ``extra``.

    ``base`` makes the names relative (so the hash does not depend on where the checkout lives); files under a
    ``__pycache__`` folder are left out. A path that does not exist is an error: the recipe names it.
    """
    sha = hashlib.sha256()
    for path in sorted(paths):
        if not path.exists():
            raise FileNotFoundError(f"{path} is named in the recipe and does not exist")
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*")
                                                     if p.is_file() and "__pycache__" not in p.parts)
        for item in files:
            name = str(item.relative_to(base)) if base is not None else str(item)
            sha.update(name.encode() + b"\0" + item.read_bytes() + b"\0")
    sha.update(json.dumps(dict(sorted((extra or {}).items())), sort_keys=True).encode())
    return sha.hexdigest()[:16]


def prepared_image(name: str, digest: str) -> str:
    """Return the tag of the prepared image ``name`` built from a recipe with hash ``digest``."""
    return f"{PREPARED_IMAGE}:{name}-{digest}"


def image_exists(image: str) -> bool:
    """Return whether podman has ``image``."""
    return podman(["image", "exists", image], check=False).returncode == 0


def commit_host(container: str, image: str, digest: str) -> None:
    """Commit a stopped-clean copy of host ``container`` as ``image`` labelled with ``digest``.

    The host's identity goes first (machine id, journal), and it is stopped so that no service writes while the
    layer is taken. The state document and PCI tree are not part of the layer: each new host gets its own
    (:func:`gpufleet_lab.hosts.start_hosts`).
    """
    podman(["exec", container, "sh", "-c",
            "systemctl stop systemd-journald.socket systemd-journald.service 2>/dev/null; "
            "rm -rf /var/log/journal/* /var/lib/nvidia-sim/state.json /etc/ansible/facts.d/gpufleet_lab.fact; "
            ": > /etc/machine-id; apt-get clean"])
    podman(["stop", "--time", "10", container])
    podman(["commit", "--quiet", "--change", f"LABEL {RECIPE_LABEL}={digest}", container, image], timeout=600)


__all__ = ["IMAGE", "PACKAGES", "PREPARED_IMAGE", "BuildReport", "PodmanError", "Recipe", "commit_host",
           "debian_mirror", "ensure_image", "image_exists", "prepared_image", "tree_digest"]
