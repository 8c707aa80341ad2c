"""The build of libnvidia-ml.so.1: soname, dependencies, exports, and layout drift failing the build."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpufleet_sim.build import BuildError, build_library, native_dir


def _readelf_dynamic(lib: Path) -> str:
    return subprocess.run(["readelf", "-d", str(lib)], check=True, capture_output=True, text=True).stdout


def test_soname_and_dependencies(nvml_libdir: Path) -> None:
    dynamic = _readelf_dynamic(nvml_libdir / "libnvidia-ml.so.1")
    assert "Library soname: [libnvidia-ml.so.1]" in dynamic
    needed = sorted(line.split("[")[1].rstrip("]") for line in dynamic.splitlines() if "(NEEDED)" in line)
    assert needed == ["libc.so.6", "libcjson.so.1"]


def test_only_nvml_symbols_are_exported(nvml_libdir: Path) -> None:
    out = subprocess.run(["nm", "-D", "--defined-only", str(nvml_libdir / "libnvidia-ml.so.1")], check=True,
                         capture_output=True, text=True).stdout
    names = [line.split()[-1] for line in out.splitlines()]
    assert names
    assert [n for n in names if not n.startswith("nvml")] == []


def _copy_native(tmp_path: Path) -> Path:
    src = tmp_path / "native"
    shutil.copytree(native_dir(), src)
    return src


def _make(src: Path, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["make", "-j1", "-C", str(src), f"OUT={out}", "DRIVER_VERSION=550.163.01",
                           f"PYTHON={sys.executable}"], capture_output=True, text=True, check=False)


@pytest.mark.parametrize(("old", "new", "message"), [
    # a field widened: the size changes
    ("typedef struct nvmlGpuInstancePlacement_st {\n    unsigned int start;",
     "typedef struct nvmlGpuInstancePlacement_st {\n    unsigned long long start;",
     "nvmlGpuInstancePlacement_t size vs pynvml"),
    # two fields swapped: same size, other offsets
    ("    unsigned int decoderCount;\n    unsigned int encoderCount;\n    unsigned int jpegCount;\n"
     "    unsigned int ofaCount;\n    unsigned long long memorySizeMB;\n} nvmlGpuInstanceProfileInfo_t;",
     "    unsigned int encoderCount;\n    unsigned int decoderCount;\n    unsigned int jpegCount;\n"
     "    unsigned int ofaCount;\n    unsigned long long memorySizeMB;\n} nvmlGpuInstanceProfileInfo_t;",
     "nvmlGpuInstanceProfileInfo_t.decoderCount offset vs pynvml"),
    # the PCI bus id buffer shortened
    ("    char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];\n} nvmlPciInfo_t;",
     "    char busId[16];\n} nvmlPciInfo_t;", "nvmlPciInfo_t size vs pynvml"),
])
def test_layout_drift_fails_the_build(tmp_path: Path, old: str, new: str, message: str) -> None:
    src = _copy_native(tmp_path)
    header = src / "nvmlsim.h"
    text = header.read_text(encoding="utf-8")
    assert old in text
    header.write_text(text.replace(old, new), encoding="utf-8")
    proc = _make(src, tmp_path / "out")
    assert proc.returncode != 0
    assert "static assertion failed" in proc.stderr
    assert message in proc.stderr
    assert not (tmp_path / "out" / "libnvidia-ml.so.1").exists()


def test_unmodified_copy_builds(tmp_path: Path) -> None:
    proc = _make(_copy_native(tmp_path), tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "out" / "libnvidia-ml.so.1").is_file()
    header = (tmp_path / "out" / "layout_asserts.h").read_text(encoding="utf-8")
    assert "nvidia-ml-py 13.615.71" in header
    assert '_Static_assert(sizeof(nvmlGpuInstanceProfileInfo_v2_t) == 152, ' in header


def test_build_library_reports_make_failures(tmp_path: Path) -> None:
    with pytest.raises(BuildError, match=r"^building libnvidia-ml.so.1 failed \(make exit 2\):"):
        build_library(tmp_path / "out", "550.163.01", python=str(tmp_path / "no-such-python"))


def test_driver_version_change_rebuilds(tmp_path: Path) -> None:
    out = tmp_path / "out"
    lib = build_library(out, "550.163.01")
    first = lib.read_bytes()
    lib = build_library(out, "570.172.08")
    assert b"570.172.08" in lib.read_bytes()
    assert b"570.172.08" not in first
