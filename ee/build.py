"""Build the execution environment of execution-environment.yml on the project's own Debian test-host image.

No container registry is reachable here, so the base is ``localhost/gpufleet-testhost:bookworm`` (what
``gpufleet-lab image build`` makes) instead of the UBI 9 image AWX users build on, with one layer on top
(ee/Containerfile.debian-base: a venv as the EE's Python, because Debian's system Python refuses the
``ensurepip`` that ansible-builder runs). ``ansible-builder create`` writes the build context from
execution-environment.yml unchanged; ``podman build`` then overrides four of its build arguments for Debian: the
base image, ``PKGMGR`` (ee/apt-dnf, the dnf subset the assemble scripts call, on apt), and the Python package and
path. The image is tagged and labelled with a hash of its recipe (the EE
definition, ee/, and everything that goes into the gpufleet wheel), and is not rebuilt while that hash is unchanged.

    python ee/build.py [--force]     # prints one JSON line: image, digest, built, build_s, size_bytes
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from gpufleet_lab.image import IMAGE as TESTHOST_IMAGE
from gpufleet_lab.image import RECIPE_LABEL, image_exists, image_recipe_label, tree_digest

REPO = Path(__file__).resolve().parents[1]
EE_IMAGE = "localhost/gpufleet-ee"
EE_BASE_IMAGE = "localhost/gpufleet-ee-debian-base"
#: What decides the image's content: the EE definition and the wheel's sources.
RECIPE_PATHS = ("execution-environment.yml", "ee", "pyproject.toml", "README.md", "LICENSE", "ansible.cfg",
                "galaxy.yml", "requirements.yml", "meta", "playbooks", "roles", "plugins", "inventories/sample",
                "src/gpufleet")
CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
DEBIAN_BUILD_ARGS = {
    "PKGMGR": "/usr/local/bin/apt-dnf",
    "PYPKG": "python3",
    "PYCMD": "/opt/ee-python/bin/python3",
}


def _run(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, **kwargs)  # type: ignore[call-overload]
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-40:])
        raise RuntimeError(f"{' '.join(argv[:3])} ... failed (rc {proc.returncode}):\n{tail}")
    return proc


def recipe_digest() -> str:
    """Return the hash of everything that decides the image (and of the base image's own recipe)."""
    base = image_recipe_label(TESTHOST_IMAGE)
    if base is None:
        raise RuntimeError(f"the base image {TESTHOST_IMAGE} does not exist; build it with `gpufleet-lab image build`")
    return tree_digest([REPO / p for p in RECIPE_PATHS], {"base": base, **DEBIAN_BUILD_ARGS}, base=REPO)


def image_tag(digest: str) -> str:
    """Return the tag of the EE image built from a recipe with hash ``digest``."""
    return f"{EE_IMAGE}:{digest}"


def image_size(image: str) -> int:
    """Return the size of ``image`` in bytes, as podman reports it."""
    return int(_run(["podman", "image", "inspect", "--format", "{{.Size}}", image]).stdout.strip())


def build(force: bool = False) -> dict[str, object]:
    """Build the EE image unless one from the same recipe exists; return what was done."""
    digest = recipe_digest()
    image = image_tag(digest)
    report: dict[str, object] = {"image": image, "digest": digest, "built": False, "build_s": 0.0}
    if force or not image_exists(image):
        start = time.monotonic()
        work = REPO / "build" / "ee"
        shutil.rmtree(work, ignore_errors=True)
        wheels = work / "wheels"
        _run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(wheels), str(REPO)])
        builder = Path(sys.executable).parent / "ansible-builder"
        _run([str(builder), "create", "-f", "execution-environment.yml", "-c", str(work / "context")], cwd=REPO)
        base = f"{EE_BASE_IMAGE}:{digest}"
        _run(["podman", "build", "--network", "host", "--build-arg", f"DEBIAN_BASE={TESTHOST_IMAGE}", "-t", base,
              "-f", str(REPO / "ee" / "Containerfile.debian-base"), str(REPO / "ee")], timeout=600)
        build_args = {"EE_BASE_IMAGE": base, **DEBIAN_BUILD_ARGS}
        args = [arg for key, value in build_args.items() for arg in ("--build-arg", f"{key}={value}")]
        # this machine's CA bundle during the build (not in the image): PyPI may only be reachable through a proxy
        # whose CA is added here
        cas = ["--volume", f"{CA_BUNDLE}:{CA_BUNDLE}:ro"] if Path(CA_BUNDLE).is_file() else []
        _run(["podman", "build", "--network", "host", *cas, *args, "--label", f"{RECIPE_LABEL}={digest}",
              "-t", image, "-f", str(work / "context" / "Containerfile"), str(work / "context")],
             timeout=1800, env=os.environ)
        report.update(built=True, build_s=round(time.monotonic() - start, 1))
    report["size_bytes"] = image_size(image)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--force", action="store_true", help="build even when an image of this recipe exists")
    args = parser.parse_args(argv)
    sys.stdout.write(json.dumps(build(force=args.force)) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
