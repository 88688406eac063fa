#!/usr/bin/env bash
# README command 2: the whole test suite. Installs what is missing, builds the
# Temporal CLI on first use, then lint, typecheck and vitest (whose global
# setup starts a dev server and creates a throwaway database).
source "$(dirname "$0")/lib.sh"
ensure_node_modules
ensure_temporal_cli
ensure_chromium
echo "[test] lint"
npm run --silent lint
echo "[test] typecheck"
npm run --silent typecheck
echo "[test] model check (SPIN, docs/MODEL.md)" && npm run --silent model:check
echo "[test] vitest"
exec npx vitest run "$@"
