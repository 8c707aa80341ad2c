#!/usr/bin/env bash
# The whole test suite: unit, simulator, integration and the Molecule scenarios on throw-away hosts.
#   bash scripts/test.sh [pytest args...]     (no arguments: all of tests/)
# Prints pytest's output, then one summary line. Exit code: pytest's; "no tests collected" (5) is a failure.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD

if ! bash scripts/bootstrap.sh; then
  echo "SUMMARY: FAILED - bootstrap failed (see above)"
  exit 1
fi
export PATH=$ROOT/${VENV:-build/venv}/bin:$PATH
export CONTAINERS_CONF=$ROOT/build/lab/containers.conf ANSIBLE_PIPELINING=True
export PY_COLORS=0 ANSIBLE_FORCE_COLOR=0 ANSIBLE_NOCOLOR=1 NO_COLOR=1

# Whatever a test leaves behind (it should leave nothing: tests/integration/test_no_leftovers.py checks),
# the lab's labelled containers and the repository servers its fleets started go when the run ends
# (Molecule destroys its own hosts, also after a failure).
cleanup() { python -m gpufleet_lab.cli cleanup >/dev/null 2>&1 || true; }
trap cleanup EXIT

log=build/test-output.log
start=$SECONDS
# No arguments: the whole tests/ tree. Arguments replace it (pyproject's testpaths still means tests/ when
# they name no path, e.g. `-m "not hosts"`).
python -m pytest -p no:cacheprovider -o console_output_style=classic --durations=15 "${@:-tests/}" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
took=$((SECONDS - start))
last=$(grep -E '^=+ .*(passed|failed|error|skipped|no tests ran|deselected).* =+$' "$log" | tail -1 | sed -E 's/^=+ //; s/ =+$//')
case $rc in
  0) echo "SUMMARY: PASSED - ${last:-no summary} (${took} s)" ;;
  5) echo "SUMMARY: FAILED - no tests were collected (pytest exit 5) (${took} s)"; rc=1 ;;
  *) echo "SUMMARY: FAILED (pytest exit ${rc}) - ${last:-no summary} (${took} s)" ;;
esac
exit "$rc"
