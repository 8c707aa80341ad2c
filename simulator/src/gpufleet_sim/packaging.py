"""Build the simulated NVIDIA stack's Debian packages, named, split and versioned like NVIDIA's.

See the package table in ``docs/simulator.md``. Every package is staged under ``<out>/sim/stage/`` and built with
``dpkg-deb --root-owner-group --build`` into ``<out>/repo/pool/``. The Python tools are installed as a package
``nvidia_sim`` under a private directory and started by small wrapper scripts in ``/usr/bin`` that run under the
host's system ``python3``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from . import build as native_build

NVML_PY_VERSION = "13.615.71"
DRIVER_BRANCHES = {"550": "550.163.01", "570": "570.172.08", "580": "580.105.08"}
TOOLKIT_VERSIONS = ("1.17.8", "1.18.0")
DCGM_VERSION = "1:4.4.1-1"
EXPORTER_VERSION = "4.4.1-4.5.2-1"
MAINTAINER = "gpufleet simulator <gpusim@example.invalid>"
TRIPLET_LIBDIR = "/usr/lib/x86_64-linux-gnu"
DRIVER_PY = "/usr/lib/nvidia-sim/python"
TOOLKIT_PY = "/usr/lib/nvidia-container-toolkit-sim/python"
DCGM_PY = "/usr/lib/datacenter-gpu-manager-4-sim/python"
EXPORTER_PY = "/usr/lib/dcgm-exporter-sim/python"
SYSTEMD_DIR = "/lib/systemd/system"
NVLSM_BIN = "/opt/nvidia/nvlsm/sbin/nvlsm"
CORE_MODULES = ("__init__.py", "store.py", "hardware.py")
SMI_MODULES = ("nvidia_smi.py", "smi_common.py", "smi_query.py", "smi_report.py", "smi_mig.py", "smi_qlog.py",
               "smi_links.py", "smi_qxml.py")

PREINST_REFUSE_REAL = """#!/bin/sh
# Refuse to install the simulated NVIDIA driver where a real one is present.
set -e
if [ "$1" = install ] || [ "$1" = upgrade ]; then
    if [ -e /proc/driver/nvidia ]; then
        echo "{pkg}: refusing to install the simulated NVIDIA driver: this host has a real NVIDIA driver \
(/proc/driver/nvidia exists). Remove the gpusim repository from this host." >&2
        exit 1
    fi
    for lib in /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1 /usr/lib64/libnvidia-ml.so.1 /usr/lib/libnvidia-ml.so.1; do
        if [ -e "$lib" ] && ! grep -q NVML_SIM_STATE "$lib" 2>/dev/null; then
            echo "{pkg}: refusing to install the simulated NVIDIA driver: $lib belongs to a real NVIDIA driver. \
Remove the gpusim repository from this host." >&2
            exit 1
        fi
    done
fi
exit 0
"""
MINIMAL_SCRIPT = "#!/bin/sh\nset -e\nexit 0\n"
WRAPPER = '''#!/usr/bin/python3
"""{command} ({product}, simulated by gpufleet: see /usr/share/doc/{package}/README)."""
import sys

sys.path.insert(0, "{pydir}")
from nvidia_sim.tools.{module} import main  # noqa: E402

sys.exit(main(version="{version}"))
'''
FileContent = bytes | str | Path
SHELL_STUB = '#!/bin/sh\n# {command} (simulated by gpufleet)\n{body}\n'


class PackagingError(RuntimeError):
    """A package could not be built (the message names it and carries the tool's output)."""


@dataclass
class Package:
    """One Debian package to build."""

    name: str
    version: str
    description: str
    arch: str = "amd64"
    depends: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    files: dict[str, FileContent] = field(default_factory=dict)  # path -> content or source file
    modes: dict[str, int] = field(default_factory=dict)
    symlinks: dict[str, str] = field(default_factory=dict)  # install path -> target
    dirs: list[str] = field(default_factory=list)
    conffiles: list[str] = field(default_factory=list)
    scripts: dict[str, str] = field(default_factory=dict)
    triggers: str = ""
    section: str = "utils"


def _tools_dir() -> Path:
    return Path(str(resources.files("gpufleet_sim").joinpath("tools")))


def _sim_dir() -> Path:
    return Path(str(resources.files("gpufleet_sim")))


def python_files(pydir: str, modules: Iterable[str], core: bool) -> dict[str, FileContent]:
    """Install paths of the ``nvidia_sim`` package files: the core (store, hardware, tools/_common) and tools."""
    files: dict[str, FileContent] = {}
    base = f"{pydir}/nvidia_sim"
    if core:
        files[f"{base}/__init__.py"] = b'"""The gpufleet simulated NVIDIA stack, as installed on a host."""\n'
        files[f"{base}/store.py"] = _sim_dir() / "store.py"
        files[f"{base}/hardware.py"] = _sim_dir() / "hardware.py"
        files[f"{base}/infiniband.py"] = _sim_dir() / "infiniband.py"
        files[f"{base}/tools/__init__.py"] = _tools_dir() / "__init__.py"
        files[f"{base}/tools/_common.py"] = _tools_dir() / "_common.py"
    for module in modules:
        files[f"{base}/tools/{module}"] = _tools_dir() / module
    return files


def wrapper(command: str, product: str, package: str, pydir: str, module: str, version: str) -> bytes:
    """The ``/usr/bin`` script that starts a tool under the system python3."""
    return WRAPPER.format(command=command, product=product, package=package, pydir=pydir, module=module,
                          version=version).encode()


def _doc(pkg: str, text: str) -> dict[str, FileContent]:
    return {f"/usr/share/doc/{pkg}/README": (text.rstrip() + "\n").encode()}


def _unit(name: str) -> dict[str, FileContent]:
    return {f"{SYSTEMD_DIR}/{name}": _tools_dir() / name}


#: The first branch whose fabric manager, NSCQ and IMEX packages carry no branch suffix in NVIDIA's CUDA repository
#: (``nvidia-fabricmanager``, ``libnvidia-nscq``, ``nvidia-imex``, pinned by version; before it
#: ``nvidia-fabricmanager-<branch>`` and so on): NVIDIA/gpu-driver-container ``ubuntu22.04/install.sh``.
UNSUFFIXED_FROM = 580


def branch_name(name: str, branch: str) -> str:
    """``name`` as NVIDIA's repository names it for ``branch``: ``name-<branch>`` before R580, ``name`` from it."""
    return name if int(branch) >= UNSUFFIXED_FROM else f"{name}-{branch}"


def pinning_file(branch: str) -> bytes:
    """The apt preferences that hold the driver packages on one branch."""
    return (f"# Installed by nvidia-driver-pinning-{branch}: keeps the NVIDIA driver on branch {branch}.\n"
            "Package: nvidia-* libnvidia-* cuda-drivers*\n"
            f"Pin: version {branch}.*\n"
            "Pin-Priority: 1000\n").encode()


def driver_packages(branch: str, driver: str, library: Path, pynvml: Path) -> list[Package]:
    """Every package of one driver branch."""
    v = f"{driver}-1"
    eq = f"(= {v})"
    fm = branch_name("nvidia-fabricmanager", branch)
    preinst = {"preinst": PREINST_REFUSE_REAL}
    common = {"postinst": MINIMAL_SCRIPT, "prerm": MINIMAL_SCRIPT}
    py = DRIVER_PY
    lib_files: dict[str, FileContent] = {f"{TRIPLET_LIBDIR}/libnvidia-ml.so.{driver}": library,
                                          f"{py}/pynvml.py": pynvml,
                                          **python_files(py, (), core=True),
                                          **_doc("libnvidia-ml1", "Simulated NVIDIA Management Library. The GPUs "
                                                 "are described by /var/lib/nvidia-sim/state.json.")}
    packages = [
        Package(f"nvidia-driver-pinning-{branch}", v, f"Pins the NVIDIA driver packages to branch {branch}",
                arch="all", files={f"/etc/apt/preferences.d/nvidia-driver-pinning-{branch}": pinning_file(branch)},
                conffiles=[f"/etc/apt/preferences.d/nvidia-driver-pinning-{branch}"], section="admin"),
        Package(f"cuda-drivers-{branch}", v, f"CUDA driver meta package, branch {branch}",
                depends=[f"nvidia-driver {eq}"], scripts=dict(preinst), section="metapackages"),
        Package("nvidia-driver", v, "NVIDIA driver meta package",
                depends=[f"libnvidia-ml1 {eq}", f"nvidia-smi {eq}", f"nvidia-persistenced {eq}",
                         f"nvidia-cuda-mps {eq}", f"nvidia-kernel-dkms {eq} | nvidia-kernel-open-dkms {eq}"],
                scripts=dict(preinst), section="metapackages"),
        Package("nvidia-kernel-dkms", v, "NVIDIA kernel module (proprietary flavour, simulated: no module)",
                conflicts=["nvidia-kernel-open-dkms"], files={f"/usr/src/nvidia-{driver}/SIMULATED": b"proprietary\n",
                                                              **_doc("nvidia-kernel-dkms", "No kernel module.")},
                scripts=dict(preinst), section="kernel"),
        Package("nvidia-kernel-open-dkms", v, "NVIDIA kernel module (open flavour, simulated: no module)",
                conflicts=["nvidia-kernel-dkms"], files={f"/usr/src/nvidia-{driver}/SIMULATED": b"open\n",
                                                         **_doc("nvidia-kernel-open-dkms", "No kernel module.")},
                scripts=dict(preinst), section="kernel"),
        Package("libnvidia-ml1", v, "NVIDIA Management Library (NVML), simulated",
                depends=["libcjson1", "libc6"], files=lib_files,
                symlinks={f"{TRIPLET_LIBDIR}/libnvidia-ml.so.1": f"libnvidia-ml.so.{driver}"},
                dirs=["/var/lib/nvidia-sim"], triggers="activate-noawait ldconfig\n",
                scripts={**preinst, **common}, section="libs"),
        Package("nvidia-smi", v, "NVIDIA System Management Interface, simulated",
                depends=[f"libnvidia-ml1 {eq}", "python3"],
                files={"/usr/bin/nvidia-smi": wrapper("nvidia-smi", "NVIDIA driver", "nvidia-smi", py, "nvidia_smi",
                                                      driver),
                       **python_files(py, SMI_MODULES, core=False)},
                modes={"/usr/bin/nvidia-smi": 0o755}, scripts={**preinst, **common}),
        Package("nvidia-persistenced", v, "NVIDIA Persistence Daemon, simulated",
                depends=[f"libnvidia-ml1 {eq}", "python3"],
                files={"/usr/bin/nvidia-persistenced": wrapper("nvidia-persistenced", "NVIDIA driver",
                                                               "nvidia-persistenced", py, "nvidia_persistenced",
                                                               driver),
                       **python_files(py, ("nvidia_persistenced.py",), core=False),
                       **_unit("nvidia-persistenced.service")},
                modes={"/usr/bin/nvidia-persistenced": 0o755}, scripts={**preinst, **common}),
        Package("nvidia-cuda-mps", v, "NVIDIA CUDA Multi Process Service, simulated",
                depends=[f"libnvidia-ml1 {eq}", "python3"],
                files={"/usr/bin/nvidia-cuda-mps-control": wrapper("nvidia-cuda-mps-control", "NVIDIA driver",
                                                                   "nvidia-cuda-mps", py, "nvidia_cuda_mps_control",
                                                                   driver),
                       "/usr/bin/nvidia-cuda-mps-server": SHELL_STUB.format(
                           command="nvidia-cuda-mps-server",
                           body='echo "nvidia-cuda-mps-server is started by nvidia-cuda-mps-control" >&2\nexit 1'
                       ).encode(),
                       **python_files(py, ("nvidia_cuda_mps_control.py",), core=False)},
                modes={"/usr/bin/nvidia-cuda-mps-control": 0o755, "/usr/bin/nvidia-cuda-mps-server": 0o755},
                scripts={**preinst, **common}),
        Package(fm, v, f"NVIDIA Fabric Manager, branch {branch}, simulated",
                depends=[f"nvidia-driver {eq}", "python3"],
                files={"/usr/bin/nv-fabricmanager": wrapper("nv-fabricmanager", "NVIDIA Fabric Manager",
                                                            fm, py, "nv_fabricmanager",
                                                            driver),
                       "/usr/share/nvidia/nvswitch/fabricmanager.cfg": _fm_config(),
                       **python_files(py, ("nv_fabricmanager.py",), core=False),
                       **_unit("nvidia-fabricmanager.service")},
                modes={"/usr/bin/nv-fabricmanager": 0o755}, scripts={**preinst, **common}),
        # NVLink 5 (HGX B200/B300): the NVLink Subnet Manager, locked to the driver like the fabric manager
        Package("nvlsm", v, "NVIDIA NVLink Subnet Manager, simulated",
                depends=[f"libnvidia-ml1 {eq}", "python3"],
                files={NVLSM_BIN: wrapper("nvlsm", "NVIDIA NVLink Subnet Manager", "nvlsm", py, "nvlsm", driver),
                       "/usr/share/nvidia/nvlsm/nvlsm.conf": _nvlsm_config(),
                       **python_files(py, ("nvlsm.py",), core=False),
                       **_unit("nvlsm.service")},
                conffiles=["/usr/share/nvidia/nvlsm/nvlsm.conf"],
                modes={NVLSM_BIN: 0o755}, scripts={**preinst, **common}),
        Package(branch_name("libnvidia-nscq", branch), v, f"NVSwitch Configuration and Query library, branch {branch} "
                "(placeholder)", files={f"{TRIPLET_LIBDIR}/libnvidia-nscq.so.{driver}": b"placeholder\n"},
                scripts=dict(preinst), section="libs"),
    ]
    return packages


#: The simulator's stand-in for the kernel's /proc/devices lines that the NVIDIA driver registers (no kernel module
#: here): the IMEX channel devices' major, read by whatever creates /dev/nvidia-caps-imex-channels/channel<N>.
SIM_PROC_DEVICES = "/usr/share/nvidia-sim/proc-devices"


def imex_package(branch: str, driver: str) -> Package:
    """``nvidia-imex-<branch>`` (``nvidia-imex`` from R580): the IMEX daemon and ``nvidia-imex-ctl`` at the driver's
    version (GB200/GB300)."""
    from .tools import nvidia_imex

    v = f"{driver}-1"
    py = DRIVER_PY
    name = branch_name("nvidia-imex", branch)
    return Package(name, v, f"NVIDIA IMEX daemon and control utility, branch {branch}, simulated",
                   depends=[f"libnvidia-ml1 (= {v})", "python3"],
                   files={"/usr/bin/nvidia-imex": wrapper("nvidia-imex", "NVIDIA IMEX", name, py,
                                                          "nvidia_imex", driver),
                          "/usr/bin/nvidia-imex-ctl": wrapper("nvidia-imex-ctl", "NVIDIA IMEX",
                                                              name, py, "nvidia_imex_ctl", driver),
                          "/etc/nvidia-imex/config.cfg": nvidia_imex.CONFIG_TEMPLATE.encode(),
                          SIM_PROC_DEVICES: b"Character devices:\n195 nvidia\n237 nvidia-caps\n"
                                            b"238 nvidia-caps-imex-channels\n",
                          **python_files(py, ("nvidia_imex.py", "nvidia_imex_ctl.py"), core=False),
                          **_unit("nvidia-imex.service")},
                   modes={"/usr/bin/nvidia-imex": 0o755, "/usr/bin/nvidia-imex-ctl": 0o755},
                   conffiles=["/etc/nvidia-imex/config.cfg"], scripts={"preinst": PREINST_REFUSE_REAL})


def _fm_config() -> bytes:
    from .tools import nv_fabricmanager

    return nv_fabricmanager.CONFIG_TEMPLATE.encode()


def _nvlsm_config() -> bytes:
    from .tools import nvlsm

    return nvlsm.CONFIG_TEMPLATE.encode()


def toolkit_packages(version: str) -> list[Package]:
    """The four NVIDIA Container Toolkit packages of one version."""
    v = f"{version}-1"
    eq = f"(= {v})"
    py = TOOLKIT_PY
    modules = ("nvidia_ctk.py", "ctk_cdi.py")
    runtime_cfg = (b"# NVIDIA Container Runtime configuration (simulated)\n"
                   b"[nvidia-container-cli]\nenvironment = []\nldconfig = \"@/sbin/ldconfig.real\"\n"
                   b"load-kmods = true\n\n[nvidia-container-runtime]\nlog-level = \"info\"\nmode = \"auto\"\n"
                   b"runtimes = [\"docker-runc\", \"runc\", \"crun\"]\n")
    return [
        Package("libnvidia-container1", v, "NVIDIA container runtime library (placeholder)",
                files={f"{TRIPLET_LIBDIR}/libnvidia-container.so.{version}": b"placeholder\n"},
                symlinks={f"{TRIPLET_LIBDIR}/libnvidia-container.so.1": f"libnvidia-container.so.{version}"},
                section="libs"),
        Package("libnvidia-container-tools", v, "NVIDIA container runtime library command-line tools (stub)",
                depends=[f"libnvidia-container1 {eq}"],
                files={"/usr/bin/nvidia-container-cli": SHELL_STUB.format(
                    command="nvidia-container-cli", body=f'echo "cli-version: {version}"')},
                modes={"/usr/bin/nvidia-container-cli": 0o755}),
        Package("nvidia-container-toolkit-base", v, "NVIDIA Container Toolkit base (nvidia-ctk), simulated",
                depends=["python3"],
                files={"/usr/bin/nvidia-ctk": wrapper("nvidia-ctk", "NVIDIA Container Toolkit",
                                                      "nvidia-container-toolkit-base", py, "nvidia_ctk", version),
                       "/usr/bin/nvidia-cdi-hook": SHELL_STUB.format(command="nvidia-cdi-hook", body="exit 0"),
                       "/etc/nvidia-container-runtime/config.toml": runtime_cfg,
                       **python_files(py, modules, core=True), **_unit("nvidia-cdi-refresh.service")},
                modes={"/usr/bin/nvidia-ctk": 0o755, "/usr/bin/nvidia-cdi-hook": 0o755},
                conffiles=["/etc/nvidia-container-runtime/config.toml"]),
        Package("nvidia-container-toolkit", v, "NVIDIA Container Toolkit, simulated",
                depends=[f"nvidia-container-toolkit-base {eq}", f"libnvidia-container-tools {eq}"],
                files={"/usr/bin/nvidia-container-runtime": SHELL_STUB.format(
                    command="nvidia-container-runtime", body='exec runc "$@"'),
                    "/usr/bin/nvidia-container-runtime-hook": SHELL_STUB.format(
                        command="nvidia-container-runtime-hook", body="exit 0")},
                modes={"/usr/bin/nvidia-container-runtime": 0o755, "/usr/bin/nvidia-container-runtime-hook": 0o755}),
    ]


def dcgm_packages() -> list[Package]:
    """DCGM 4 (core + CUDA flavours) and dcgm-exporter."""
    from .tools.dcgm_exporter import DEFAULT_COUNTERS_CSV

    dcgm_upstream = DCGM_VERSION.split(":", 1)[1].rsplit("-", 1)[0]
    exporter_upstream = EXPORTER_VERSION.rsplit("-", 1)[0]
    core_eq = f"(= {DCGM_VERSION})"
    core = Package("datacenter-gpu-manager-4-core", DCGM_VERSION, "NVIDIA Data Center GPU Manager 4, simulated",
                   depends=["python3"],
                   files={"/usr/bin/nv-hostengine": wrapper("nv-hostengine", "NVIDIA DCGM",
                                                            "datacenter-gpu-manager-4-core", DCGM_PY, "nv_hostengine",
                                                            dcgm_upstream),
                          "/usr/bin/dcgmi": wrapper("dcgmi", "NVIDIA DCGM", "datacenter-gpu-manager-4-core", DCGM_PY,
                                                    "dcgmi", dcgm_upstream),
                          **python_files(DCGM_PY, ("nv_hostengine.py", "dcgmi.py", "dcgm_checks.py"), core=True),
                          **_unit("nvidia-dcgm.service")},
                   modes={"/usr/bin/nv-hostengine": 0o755, "/usr/bin/dcgmi": 0o755})
    flavours = [Package(f"datacenter-gpu-manager-4-cuda{n}", DCGM_VERSION, f"DCGM 4 for CUDA {n}, simulated",
                        depends=[f"datacenter-gpu-manager-4-core {core_eq}"],
                        files=_doc(f"datacenter-gpu-manager-4-cuda{n}", f"DCGM CUDA {n} components (none)."))
                for n in (12, 13)]
    exporter = Package("datacenter-gpu-manager-exporter", EXPORTER_VERSION, "NVIDIA DCGM exporter, simulated",
                       depends=["datacenter-gpu-manager-4-core", "python3"],
                       files={"/usr/bin/dcgm-exporter": wrapper("dcgm-exporter", "NVIDIA DCGM exporter",
                                                                "datacenter-gpu-manager-exporter", EXPORTER_PY,
                                                                "dcgm_exporter", exporter_upstream),
                              "/etc/dcgm-exporter/default-counters.csv": DEFAULT_COUNTERS_CSV.encode(),
                              **python_files(EXPORTER_PY, ("dcgm_exporter.py",), core=True),
                              **_unit("nvidia-dcgm-exporter.service")},
                       modes={"/usr/bin/dcgm-exporter": 0o755},
                       conffiles=["/etc/dcgm-exporter/default-counters.csv"])
    return [core, *flavours, exporter]


CUDA_KEYRING_VERSION = "1.1-1"
CUDA_KEYRING_FILE = "/usr/share/keyrings/cuda-archive-keyring.gpg"


def cuda_keyring_package(distro: str, arch: str, repo_url: str, keyring: bytes) -> Package:
    """NVIDIA's ``cuda-keyring`` for one ``<distro>/<arch>`` repository: the key and an apt source signed by it.

    As NVIDIA's package does, it installs the binary key as ``/usr/share/keyrings/cuda-archive-keyring.gpg`` and
    ``/etc/apt/sources.list.d/cuda-<distro>-<arch>.list`` naming ``repo_url`` (here: the simulated server).
    """
    source = f"/etc/apt/sources.list.d/cuda-{distro}-{arch}.list"
    return Package("cuda-keyring", CUDA_KEYRING_VERSION, f"GPG keyring and apt source of the CUDA repository "
                   f"{distro}/{arch}", arch="all",
                   files={CUDA_KEYRING_FILE: keyring,
                          source: f"deb [signed-by={CUDA_KEYRING_FILE}] {repo_url} /\n".encode()},
                   conffiles=[source], section="admin")


def control_text(pkg: Package) -> str:
    """The DEBIAN/control file of a package."""
    lines = [f"Package: {pkg.name}", f"Version: {pkg.version}", f"Architecture: {pkg.arch}",
             f"Maintainer: {MAINTAINER}", f"Section: {pkg.section}", "Priority: optional"]
    if pkg.depends:
        lines.append(f"Depends: {', '.join(pkg.depends)}")
    if pkg.conflicts:
        lines.append(f"Conflicts: {', '.join(pkg.conflicts)}")
    lines += [f"Description: {pkg.description}",
              " Part of the gpufleet simulated NVIDIA stack, for testing GPU provisioning without a GPU.",
              " Never install it on a host with a real NVIDIA GPU."]
    return "\n".join(lines) + "\n"


def stage(pkg: Package, root: Path) -> Path:
    """Lay out a package's tree (files, links, DEBIAN/) under ``root``; return the tree."""
    tree = root / f"{pkg.name}_{pkg.version.replace(':', '%')}"
    if tree.exists():
        shutil.rmtree(tree)
    for path, content in pkg.files.items():
        target = tree / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, Path):
            shutil.copyfile(content, target)
        else:
            target.write_bytes(content.encode() if isinstance(content, str) else content)
        target.chmod(pkg.modes.get(path, 0o644))
    for path, dest in pkg.symlinks.items():
        link = tree / path.lstrip("/")
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(dest)
    for path in pkg.dirs:
        (tree / path.lstrip("/")).mkdir(parents=True, exist_ok=True)
    debian = tree / "DEBIAN"
    debian.mkdir(parents=True, exist_ok=True)
    (debian / "control").write_text(control_text(pkg), encoding="utf-8")
    if pkg.conffiles:
        (debian / "conffiles").write_text("\n".join(pkg.conffiles) + "\n", encoding="utf-8")
    if pkg.triggers:
        (debian / "triggers").write_text(pkg.triggers, encoding="utf-8")
    for name, text in pkg.scripts.items():
        script = debian / name
        script.write_text(text.replace("{pkg}", pkg.name), encoding="utf-8")
        script.chmod(0o755)
    for folder in [tree, *[p for p in tree.rglob("*") if p.is_dir() and not p.is_symlink()]]:
        folder.chmod(0o755)
    return tree


def build_deb(tree: Path, pool: Path) -> Path:
    """``dpkg-deb --root-owner-group --build`` one staged tree into ``pool``; return the .deb."""
    pool.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(tree), str(pool)],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise PackagingError(f"dpkg-deb failed for {tree.name}:\n{proc.stdout}{proc.stderr}")
    name = proc.stdout.strip().split("'")[-2] if "'" in proc.stdout else ""
    return Path(name) if name else pool


def fetch_wheel(dest: Path, version: str = NVML_PY_VERSION) -> Path:
    """The pinned nvidia-ml-py wheel, downloaded once with ``pip download`` into ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    found = sorted(dest.glob(f"nvidia_ml_py-{version}-*.whl"))
    if not found:
        proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                               "-d", str(dest), f"nvidia-ml-py=={version}"], capture_output=True, text=True,
                              check=False)
        if proc.returncode != 0:
            raise PackagingError(f"pip download nvidia-ml-py=={version} failed:\n{proc.stdout}{proc.stderr}")
        found = sorted(dest.glob(f"nvidia_ml_py-{version}-*.whl"))
    if not found:
        raise PackagingError(f"no nvidia-ml-py {version} wheel in {dest}")
    return found[0]


def extract_pynvml(wheel: Path, dest: Path) -> Path:
    """Copy ``pynvml.py`` out of the wheel (unmodified)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as archive:
        dest.write_bytes(archive.read("pynvml.py"))
    return dest


def all_packages(sim_dir: Path, wheel: Path) -> list[Package]:
    """Build the libraries (one per driver branch) and return every package definition."""
    pynvml = extract_pynvml(wheel, sim_dir / "python" / "pynvml.py")
    packages: list[Package] = []
    for branch, driver in DRIVER_BRANCHES.items():
        library = native_build.build_library(sim_dir / "lib" / driver, driver)
        packages += driver_packages(branch, driver, library, pynvml)
        packages.append(imex_package(branch, driver))
    for version in TOOLKIT_VERSIONS:
        packages += toolkit_packages(version)
    packages += dcgm_packages()
    return packages


def build_all(out: Path, pool: Path | None = None) -> list[Path]:
    """Build every package into ``<out>/repo/pool`` (or ``pool``); return the .deb paths."""
    sim_dir = out / "sim"
    pool = pool or out / "repo" / "pool"
    wheel = fetch_wheel(sim_dir / "wheels")
    for old in pool.glob("*.deb") if pool.is_dir() else []:
        old.unlink()
    debs = []
    for pkg in all_packages(sim_dir, wheel):
        debs.append(build_deb(stage(pkg, sim_dir / "stage"), pool))
    install_local_tools(sim_dir)
    return sorted(pool.glob("*.deb"))


LOCAL_TOOLS = {"nvidia-smi": "nvidia_smi", "nvidia-persistenced": "nvidia_persistenced",
               "nv-fabricmanager": "nv_fabricmanager", "nvidia-ctk": "nvidia_ctk", "nv-hostengine": "nv_hostengine",
               "dcgmi": "dcgmi", "dcgm-exporter": "dcgm_exporter", "nvidia-cuda-mps-control": "nvidia_cuda_mps_control",
               "nvidia-imex": "nvidia_imex", "nvidia-imex-ctl": "nvidia_imex_ctl",
               "nvlsm": "nvlsm"}


def install_local_tools(sim_dir: Path, version: str = DRIVER_BRANCHES["570"]) -> Path:
    """Lay out ``<sim>/python/nvidia_sim`` and ``<sim>/bin/<tool>`` wrappers for use on this machine."""
    pydir = sim_dir / "python"
    modules = sorted(p.name for p in _tools_dir().glob("*.py") if p.name not in ("__init__.py", "_common.py"))
    for path, content in python_files(str(pydir), modules, core=True).items():
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, Path):
            shutil.copyfile(content, target)
        else:
            target.write_bytes(content.encode() if isinstance(content, str) else content)
    bindir = sim_dir / "bin"
    bindir.mkdir(parents=True, exist_ok=True)
    dcgm = DCGM_VERSION.split(":")[1].rsplit("-", 1)[0]
    versions = {"nvidia-ctk": TOOLKIT_VERSIONS[-1], "nv-hostengine": dcgm, "dcgmi": dcgm,
                "dcgm-exporter": EXPORTER_VERSION.rsplit("-", 1)[0]}
    for command, module in LOCAL_TOOLS.items():
        script = bindir / command
        text = wrapper(command, "local build", "gpusim", str(pydir), module, versions.get(command, version))
        script.write_bytes(text
                           .replace(b"#!/usr/bin/python3", f"#!{sys.executable}".encode()))
        script.chmod(0o755)
    return bindir
