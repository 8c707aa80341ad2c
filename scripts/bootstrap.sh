#!/usr/bin/env bash
# Set up everything the demo and the tests need, on a Debian 12 machine, as root. Idempotent: each step is
# skipped when its result is already there (apt packages, build/venv, the simulated repository, the host image).
#   build/venv           Python venv with gpufleet installed editable, pinned by requirements/constraints.txt
#   build/repo           the simulated NVIDIA apt repository + PEP 503 index (gpusim build)
#   build/lab            the test-host image tarball, containers.conf; image localhost/gpufleet-testhost:bookworm
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
export DEBIAN_FRONTEND=noninteractive

step() { printf '[bootstrap %5ss] %s\n' "$SECONDS" "$*"; }

APT_PACKAGES=(podman runc debootstrap zstd dpkg-dev apt-utils libcjson-dev gnupg fakeroot gcc make curl python3-venv)
missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}\n' "$pkg" 2>/dev/null | grep -q '^install ok installed$' || missing+=("$pkg")
done
if ((${#missing[@]})); then
  step "apt-get install ${missing[*]}"
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  step "Debian packages present"
fi

PYTHON=${PYTHON:-python3}
if [[ ! -x build/venv/bin/python ]]; then
  step "python venv build/venv ($("$PYTHON" --version))"
  mkdir -p build
  "$PYTHON" -m venv build/venv
fi
stamp=build/venv/.gpufleet-install
want=$(cat pyproject.toml requirements/constraints.txt | sha256sum | cut -d' ' -f1)
if [[ "$(cat "$stamp" 2>/dev/null)" != "$want" ]]; then
  step "pip install -c requirements/constraints.txt -e '.[dev]'"
  build/venv/bin/pip install -q --disable-pip-version-check -c requirements/constraints.txt -e '.[dev]'
  echo "$want" > "$stamp"
else
  step "build/venv up to date"
fi
export PATH=$ROOT/build/venv/bin:$PATH
mkdir -p build/lab
export CONTAINERS_CONF=$ROOT/build/lab/containers.conf

step "gpusim build (simulated NVIDIA packages, signed repository, PEP 503 index)"
gpusim build

step "test-host image"
python -m gpufleet.lab.cli image build
step "done"
