#!/usr/bin/env bash
# The main job: provision a simulated GPU fleet with playbooks/site.yml and print a per-host summary.
#   bash scripts/demo.sh [--keep]     (--keep leaves the fleet running; `gpufleet-lab fleet down` stops it)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/bootstrap.sh
export PATH=$PWD/build/venv/bin:$PATH CONTAINERS_CONF=$PWD/build/lab/containers.conf
exec python tools/demo.py "$@"
