#!/usr/bin/env bash
# README command 2: the whole test suite. Installs what is missing, builds the
# Temporal CLI on first use, then lint, typecheck and vitest (whose global
# setup starts a dev server and creates a throwaway database). Then, for a
# whole-suite run (no arguments), the order, fault and UI tests again on the
# Temporal server on Postgres (scripts/test-postgres.sh; TEST_POSTGRES=0 skips it),
# and through the real provider adapters, Stripe and SMTP (scripts/test-providers.sh;
# TEST_PROVIDERS=0 skips it).
source "$(dirname "$0")/lib.sh"
ensure_node_modules
ensure_temporal_cli
if [ $# -eq 0 ] && [ "${TEST_POSTGRES:-1}" != 0 ]; then
  ensure_temporal_server
fi
ensure_chromium
echo "[test] lint"
npm run --silent lint
echo "[test] typecheck"
npm run --silent typecheck
echo "[test] model check (SPIN, docs/MODEL.md)" && npm run --silent model:check
if [ $# -eq 0 ]; then
  # The core package on its own, as a user installs it: its API reference must build without
  # warnings, and its tests need only Postgres and the Temporal CLI, no part of the app.
  echo "[test] the core package (packages/onceflow): API reference and its own tests"
  (cd packages/onceflow && npx typedoc --logLevel Warn && npx vitest run)
fi
echo "[test] vitest"
npx vitest run "$@"
if [ $# -eq 0 ] && [ "${TEST_POSTGRES:-1}" != 0 ]; then
  echo "[test] vitest on the Temporal server on Postgres (scripts/test-postgres.sh)"
  bash scripts/test-postgres.sh
fi
if [ $# -eq 0 ] && [ "${TEST_PROVIDERS:-1}" != 0 ]; then
  echo "[test] vitest through the Stripe and SMTP adapters (scripts/test-providers.sh)"
  bash scripts/test-providers.sh
fi
