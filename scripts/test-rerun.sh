#!/usr/bin/env bash
# npm test's second vitest run: the tests that depend on the Temporal server's backend or on the
# provider adapters (lists in scripts/lib.sh), again with both switched: the Temporal server on
# Postgres (TEMPORAL_BACKEND=postgres: its own databases, dropped at the end) and the Stripe and
# SMTP adapters (against the sandbox's Stripe surface and a local SMTP server, docs/PROVIDERS.md).
# The two switches never meet (the adapters don't talk to Temporal), so one run covers both; every
# other test runs once, in the first run. TEST_POSTGRES=0 or TEST_PROVIDERS=0 leaves one switch
# off (`npm run test:providers` and `npm run test:postgres`); extra arguments go to vitest in
# place of the lists (e.g. a single file).
source "$(dirname "$0")/lib.sh"
ensure_node_modules
files=()
if [ "${TEST_POSTGRES:-1}" != 0 ]; then
  export TEMPORAL_BACKEND=postgres
  unset TEMPORAL_ADDRESS # this run starts its own server
  files+=("${BACKEND_TESTS[@]}")
fi
if [ "${TEST_PROVIDERS:-1}" != 0 ]; then
  export PAYMENT_PROVIDER=stripe EMAIL_PROVIDER=smtp
  files+=("${PROVIDER_TESTS[@]}")
fi
ensure_temporal_cli
ensure_chromium
# These files wait on Temporal's timers and on child processes more than they compute: six forks
# finish sooner than four, and four than two (docs/BENCHMARKS.md).
export TEST_FORKS="${TEST_FORKS:-6}"
if [ $# -eq 0 ]; then
  if [ ${#files[@]} -eq 0 ]; then
    echo "[test] TEST_POSTGRES=0 and TEST_PROVIDERS=0: nothing to run again" >&2
    exit 0
  fi
  set -- "${files[@]}"
fi
exec npx vitest run "$@"
