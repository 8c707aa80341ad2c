#!/usr/bin/env bash
# Set up everything the demo and the tests need, on a Debian 12 machine, as root. Idempotent: each step is
# skipped when its result is already there (apt packages, build/venv, the simulated repository, the host image).
#   build/venv           Python venv with gpufleet installed editable, pinned by requirements/constraints.txt
#   build/repo           the simulated NVIDIA apt repository + PEP 503 index (gpusim build)
#   build/lab            the test-host image tarball, containers.conf; image localhost/gpufleet-testhost:bookworm
#   build/prometheus     Debian's prometheus package unpacked (never installed: no server starts), for promtool and the
#                        integration test's server; build/prometheus/deb also holds prometheus-node-exporter's .deb
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
export DEBIAN_FRONTEND=noninteractive

step() { printf '[bootstrap %5ss] %s\n' "$SECONDS" "$*"; }

APT_PACKAGES=(podman runc debootstrap zstd dpkg-dev apt-utils libcjson-dev gnupg fakeroot gcc make curl python3-venv
  chromium)  # chromium: tests/integration open the HTML fleet report headless (issue 18)
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

# CI and the README use Python 3.11 with requirements/constraints.txt. Another controller Python, e.g. 3.12:
#   VENV=build/venv312 PYTHON=$(pyenv prefix 3.12.1)/bin/python3.12 \
#   CONSTRAINTS=requirements/constraints-py312.txt bash scripts/test.sh
PYTHON=${PYTHON:-python3}
VENV=${VENV:-build/venv}
CONSTRAINTS=${CONSTRAINTS:-requirements/constraints.txt}
if [[ ! -x $VENV/bin/python ]]; then
  step "python venv $VENV ($("$PYTHON" --version))"
  mkdir -p "$(dirname "$VENV")"
  "$PYTHON" -m venv "$VENV"
fi
stamp=$VENV/.gpufleet-install
want=$(cat pyproject.toml simulator/pyproject.toml "$CONSTRAINTS" | sha256sum | cut -d' ' -f1)
if [[ "$(cat "$stamp" 2>/dev/null)" != "$want" ]]; then
  step "pip install -c $CONSTRAINTS -e '.[dev]' -e ./simulator"
  "$VENV/bin/pip" install -q --disable-pip-version-check -c "$CONSTRAINTS" -e '.[dev]' -e ./simulator
  echo "$want" > "$stamp"
else
  step "$VENV up to date"
fi
# promtool (tests/unit/test_gpu_monitoring_role.py) comes from Debian's prometheus package, downloaded and unpacked
# into build/prometheus: installing it would start a Prometheus server on this machine.
if [[ ! -x build/prometheus/usr/bin/promtool ]]; then
  step "promtool: apt-get download prometheus, dpkg -x into build/prometheus (not installed)"
  rm -rf build/prometheus && mkdir -p build/prometheus/deb
  (cd build/prometheus/deb && { apt-get download -q prometheus 2>/dev/null \
    || { apt-get update -qq && apt-get download -q prometheus; }; })
  dpkg -x build/prometheus/deb/prometheus_*.deb build/prometheus
  build/prometheus/usr/bin/promtool --version | head -1
else
  step "promtool present (build/prometheus)"
fi
# node_exporter for the lab hosts (tests/integration/test_monitoring_prometheus.py installs this .deb inside them,
# offline): downloaded only, next to the prometheus .deb; nothing is installed on this machine.
if ! compgen -G 'build/prometheus/deb/prometheus-node-exporter_*.deb' >/dev/null; then
  step "node_exporter: apt-get download prometheus-node-exporter into build/prometheus/deb (not installed)"
  mkdir -p build/prometheus/deb
  (cd build/prometheus/deb && { apt-get download -q prometheus-node-exporter 2>/dev/null \
    || { apt-get update -qq && apt-get download -q prometheus-node-exporter; }; })
  ls build/prometheus/deb/prometheus-node-exporter_*.deb
else
  step "prometheus-node-exporter .deb present (build/prometheus/deb)"
fi

export PATH=$ROOT/$VENV/bin:$PATH
mkdir -p build/lab
export CONTAINERS_CONF=$ROOT/build/lab/containers.conf

step "gpusim build (simulated NVIDIA packages, signed repository, PEP 503 index)"
gpusim build

step "test-host image"
python -m gpufleet_lab.cli image build
step "done"
