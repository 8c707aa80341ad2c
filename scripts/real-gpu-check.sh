#!/usr/bin/env bash
# Read-only check of a real GPU machine: what NVIDIA's tools and NVML report, and what gpufleet makes of it.
#
#   bash scripts/real-gpu-check.sh OUT_DIR [WHEELHOUSE]
#
# Needs only the NVIDIA driver (nvidia-smi, libnvidia-ml.so.1) and a Python 3.11+ (PYTHON, default python3).
# Installs nothing system-wide: a venv under OUT_DIR/venv gets gpufleet and the pinned nvidia-ml-py, from
# WHEELHOUSE (a folder of wheels carried to the machine: `pip download -d wheels --python-version 3.12
# --only-binary=:all: dist/gpufleet-*.whl nvidia-ml-py==13.615.71`) or, without one, from the package index.
# Never changes a GPU setting, MIG mode, clock or power limit and never resets a GPU: it runs nvidia-smi's query
# commands, NVML getters (nvml*Get* only, the dump tool of tests/data/ground-truth), gpu_facts, gpu_health and
# `gpufleet verify` against localhost with every report file written under OUT_DIR (not /var/lib/gpufleet).
# Each step has its own time limit; one that fails is recorded (OUT_DIR/steps.tsv) and the rest still run.
# Commit what it captured under tests/data/ground-truth/<machine>/ with the date, driver and machine.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${1:?usage: real-gpu-check.sh OUT_DIR [WHEELHOUSE]}
WHEELS=${2:-}
PYTHON=${PYTHON:-python3}
mkdir -p "$OUT"/nvidia-smi "$OUT"/nvml "$OUT"/gpufleet
OUT=$(cd "$OUT" && pwd)
: > "$OUT/steps.tsv"

# step NAME SECONDS OUTFILE CMD...: run one read-only command, its output to OUTFILE, its status to steps.tsv
step() {
  local name=$1 limit=$2 file=$3 start=$SECONDS rc
  shift 3
  timeout "$limit" "$@" > "$file" 2> "$file.err"
  rc=$?
  [[ -s $file.err ]] || rm -f "$file.err"
  printf '%s\t%s\t%s s\n' "$name" "$rc" "$((SECONDS - start))" >> "$OUT/steps.tsv"
  printf '[real-gpu-check] %-28s rc %-3s %3s s\n' "$name" "$rc" "$((SECONDS - start))"
}

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "kernel: $(uname -r)"
  echo "os: $(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME")"
  echo "driver: $(cat /proc/driver/nvidia/version 2>/dev/null | head -1)"
  echo "virtualization: $(systemd-detect-virt 2>/dev/null || echo unknown)"
  echo "python: $("$PYTHON" --version 2>&1)"
  echo "gpufleet commit: $(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)"
} > "$OUT/machine.txt"

# NVIDIA's own view (query commands only)
step nvidia-smi-q 120 "$OUT/nvidia-smi/q.txt" nvidia-smi -q
step nvidia-smi-qx 120 "$OUT/nvidia-smi/qx.xml" nvidia-smi -q -x
step nvidia-smi-L 30 "$OUT/nvidia-smi/L.txt" nvidia-smi -L
step nvidia-smi-default 30 "$OUT/nvidia-smi/default.txt" nvidia-smi
step mig-lgip 60 "$OUT/nvidia-smi/mig_lgip.txt" nvidia-smi mig -lgip
step mig-lgipp 60 "$OUT/nvidia-smi/mig_lgipp.txt" nvidia-smi mig -lgipp
step mig-lcip 60 "$OUT/nvidia-smi/mig_lcip.txt" nvidia-smi mig -lcip
step nvlink-s 60 "$OUT/nvidia-smi/nvlink_s.txt" nvidia-smi nvlink -s
step topo-m 60 "$OUT/nvidia-smi/topo_m.txt" nvidia-smi topo -m
step dmesg-nvrm 30 "$OUT/dmesg.txt" sh -c 'dmesg 2>&1 | grep -E "NVRM|nvidia" | tail -200'

# gpufleet and the pinned bindings in a private venv
VENV=$OUT/venv
step venv 120 "$OUT/venv.txt" "$PYTHON" -m venv "$VENV"
if [[ -n $WHEELS ]]; then
  step pip-install 300 "$OUT/pip.txt" "$VENV/bin/pip" install --no-index --find-links "$WHEELS" gpufleet \
    nvidia-ml-py==13.615.71
else
  step pip-install 300 "$OUT/pip.txt" "$VENV/bin/pip" install "$ROOT" nvidia-ml-py==13.615.71
fi

# every NVML getter (read-only), the same tool that made the ground truth
step nvml-getters 300 "$OUT/nvml/getters-nvidia-ml-py-13.615.71.jsonl" \
  "$VENV/bin/python" "$ROOT/simulator/src/gpufleet_sim/nvml_getters_dump.py"

# gpufleet against localhost: facts and verify, reports under OUT
cat > "$OUT/gpufleet/inv.yml" <<EOF
all:
  children:
    gpu_nodes:
      hosts:
        localhost:
          ansible_connection: local
          ansible_python_interpreter: $VENV/bin/python
          gpufleet_python: $VENV/bin/python
          gpu_health_report_path: $OUT/gpufleet/health.json
          gpu_health_textfile_path: $OUT/gpufleet/gpufleet_health.prom
EOF
export PATH=$VENV/bin:$PATH
step gpufleet-facts 180 "$OUT/gpufleet/facts.json" gpufleet facts -i "$OUT/gpufleet/inv.yml" --json
step gpufleet-verify 180 "$OUT/gpufleet/verify.json" gpufleet verify -i "$OUT/gpufleet/inv.yml" --json
rm -rf "$VENV"
echo "[real-gpu-check] done: $OUT (steps.tsv lists each step's exit status)"
