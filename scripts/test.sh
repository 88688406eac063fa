#!/usr/bin/env bash
# README command 2: the whole test suite. Installs what is missing, builds the
# Temporal CLI on first use, then lint, typecheck with the model check, and the
# core package's own tests side by side; then vitest (whose global setup starts a
# dev server and creates a throwaway database). Then, for a whole-suite run (no
# arguments), the tests that depend on the Temporal backend or the provider set
# again, on the Temporal server on Postgres through the Stripe and SMTP adapters
# (scripts/test-rerun.sh; TEST_POSTGRES=0 or TEST_PROVIDERS=0 leaves one off).
source "$(dirname "$0")/lib.sh"
# One line per step, printed last whether the run passed or not, so a CI log ends with the whole
# run's outcome (each vitest run's own summary is above, with its output).
summary="$(mktemp)"
started=$SECONDS
print_summary() {
  local status=$?
  echo "[test] ==== summary: $([ "$status" = 0 ] && echo passed || echo "FAILED (exit ${status})") in $((SECONDS - started)) s ===="
  cat "$summary"
  rm -f "$summary"
}
trap print_summary EXIT
# record LABEL STATUS [TESTS]: TESTS is vitest's "Tests ..." line, when the step ran vitest.
record() {
  local verdict=passed
  [ "$2" = 0 ] || verdict="FAILED (exit $2)"
  echo "  ${verdict}: $1${3:+ -- $3}" >>"$summary"
}
# The last "Tests ..." line of a vitest output, without colours.
tests_line() {
  sed 's/\x1b\[[0-9;]*m//g' "$1" | grep -E '^ +Tests +[0-9]' | sed -E 's/^ +//; s/ +/ /g' | tail -1 || true
}
ensure_node_modules
ensure_temporal_cli
if [ $# -eq 0 ] && [ "${TEST_POSTGRES:-1}" != 0 ]; then
  ensure_temporal_server
fi
ensure_chromium
# Runs "label" "command" pairs side by side, each one's output printed whole when it ends (in the
# order given); fails when any fails. For steps that wait more than they compute, or that each take
# one core, on a machine with two.
side_by_side() {
  local logs pids=() labels=() failed=0 i status
  logs="$(mktemp -d)"
  while [ $# -gt 0 ]; do
    labels+=("$1")
    echo "[test] ${1} (output when it ends)"
    bash -c "$2" >"$logs/${#pids[@]}.log" 2>&1 &
    pids+=($!)
    shift 2
  done
  # Background jobs of a script ignore Ctrl-C: stop them with the script.
  trap 'kill "${pids[@]}" 2>/dev/null || true' INT TERM
  for i in "${!pids[@]}"; do
    status=0
    wait "${pids[$i]}" || status=$?
    echo "[test] ---- ${labels[$i]} (exit ${status}) ----"
    cat "$logs/$i.log"
    record "${labels[$i]}" "$status" "$(tests_line "$logs/$i.log")"
    [ "$status" = 0 ] || failed=1
  done
  trap - INT TERM
  rm -rf "$logs"
  return "$failed"
}

checks=(
  "lint" "npm run --silent lint"
  "typecheck, then the SPIN model check (docs/MODEL.md)" "npm run --silent typecheck && npm run --silent model:check"
)
if [ $# -eq 0 ]; then
  # The core package on its own, as a user installs it: its API reference must build without
  # warnings, and its tests need only Postgres and the Temporal CLI, no part of the app.
  checks+=("the core package (packages/onceflow): API reference and its own tests"
    "cd packages/onceflow && npx typedoc --logLevel Warn && npx vitest run")
fi
side_by_side "${checks[@]}"
echo "[test] vitest"
# Its output stays on the terminal (a TTY keeps vitest's live view); the counts come from its JSON.
counts="$(mktemp)"
status=0
npx vitest run --reporter=default --reporter=json --outputFile.json="$counts" "$@" || status=$?
record "vitest on the Temporal dev server" "$status" "$(node -e '
  const r = JSON.parse(require("node:fs").readFileSync(process.argv[1], "utf8"));
  const skipped = r.numPendingTests + r.numTodoTests;
  console.log(`Tests ${r.numPassedTests} passed, ${r.numFailedTests} failed, ${skipped} skipped (${r.numTotalTests})`);
' "$counts" 2>/dev/null || true)"
rm -f "$counts"
[ "$status" = 0 ] || exit "$status"
on=""
if [ "${TEST_POSTGRES:-1}" != 0 ]; then on="the Temporal server on Postgres"; fi
if [ "${TEST_PROVIDERS:-1}" != 0 ]; then on="${on:+$on and }the Stripe and SMTP adapters"; fi
if [ $# -eq 0 ] && [ -n "$on" ]; then
  again="vitest again on ${on} (scripts/test-rerun.sh)"
  echo "[test] ${again}"
  rerun="$(mktemp)"
  status=0
  bash scripts/test-rerun.sh 2>&1 | tee "$rerun" || status=$?
  record "$again" "$status" "$(tests_line "$rerun")"
  rm -f "$rerun"
  exit "$status"
fi
