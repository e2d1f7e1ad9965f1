#!/usr/bin/env bash
# Runs the tests one area at a time (an area is a folder of test/: addon,
# qcuda, vm, ...) and prints at the end how long each took and what it
# counted, so a slow area shows without a whole-run figure to guess from
# (review 3 §4.7: none was recorded anywhere).
#
#   bash test/areas.sh [AREA...] [-- AVA_PATTERN...]
#
# With no AREA, every folder of dist/test that holds tests, so an area
# added later is run too. Patterns after -- go to each ava run (make check
# passes '!dist/test/...' to leave out tests that need what it does not
# build). Exits 1 when any area failed; every area runs all the same. The
# failed tests are listed again at the end, where a tail of the log shows them.
# UNCOVERED_AREAS (make test: 'run vm') run without NODE_V8_COVERAGE, so
# that c8's coverage is not asked of processes that cannot write it.
set -uo pipefail
cd "$(dirname "$0")/.."

areas=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do
  areas+=("$1")
  shift
done
[ "${1:-}" = -- ] && shift
extra=("$@")
if [ ${#areas[@]} -eq 0 ]; then
  mapfile -t areas < <(find dist/test -name '*.test.js' | cut -d/ -f3 | sort -u)
fi

log=$(mktemp)
trap 'rm -f "$log"' EXIT
rows=()
failures=()
passed=0
failed=0
status=0
start_all=$SECONDS
for area in "${areas[@]}"; do
  echo "== $area"
  t0=$SECONDS
  cover=()
  [[ " ${UNCOVERED_AREAS:-} " == *" $area "* ]] && cover=(-u NODE_V8_COVERAGE)
  env "${cover[@]}" node_modules/.bin/ava "dist/test/$area/**" "${extra[@]}" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  # ava's closing lines: "  12 tests passed", "  1 test failed", "  2 tests skipped";
  # where some failed it prints no count of those passed: its ✔ lines are.
  p=$(sed -n 's/^ *\([0-9]*\) tests\{0,1\} passed.*/\1/p' "$log" | tail -n1)
  [ -n "$p" ] || p=$(grep -c '^ *✔' "$log")
  f=$(sed -n 's/^ *\([0-9]*\) tests\{0,1\} failed.*/\1/p' "$log" | tail -n1)
  s=$(sed -n 's/^ *\([0-9]*\) tests\{0,1\} skipped.*/\1/p' "$log" | tail -n1)
  # A run that exits non-zero without a count of failures (a file that
  # threw on load, a timeout) counts as one failure.
  [ "$rc" -ne 0 ] && [ "${f:-0}" -eq 0 ] && f=1
  passed=$((passed + ${p:-0}))
  failed=$((failed + ${f:-0}))
  [ "$rc" -eq 0 ] || status=1
  # Named again at the end: CI keeps only the tail of this output.
  mapfile -t -O "${#failures[@]}" failures < <(grep -E '^ *✘' "$log" | cut -c1-300)
  rows+=("$(printf '%-12s %6ss %5s passed %3s failed %3s skipped%s' "$area" $((SECONDS - t0)) "${p:-0}" "${f:-0}" "${s:-0}" \
    "$([ "$rc" -eq 0 ] || echo '  FAILED')")")
done

echo
echo "Time per test area (test/areas.sh):"
printf '  %s\n' "${rows[@]}"
printf '  %-12s %6ss\n' total $((SECONDS - start_all))
echo "$passed passed, $failed failed"
if [ ${#failures[@]} -gt 0 ]; then
  echo "Failed:"
  printf '  %s\n' "${failures[@]}"
fi
exit $status
