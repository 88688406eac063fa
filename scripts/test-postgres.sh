#!/usr/bin/env bash
# `npm run test:postgres`: the order, fault and UI tests against the Temporal
# server on Postgres (TEMPORAL_BACKEND=postgres) instead of the dev server.
# The global setup builds the server on first use, creates per-run Temporal
# databases next to DATABASE_URL's (or on TEMPORAL_POSTGRES_URL) and drops
# them at the end. Extra arguments go to vitest (e.g. a single file).
source "$(dirname "$0")/lib.sh"
ensure_node_modules
export TEMPORAL_BACKEND=postgres
unset TEMPORAL_ADDRESS # this run starts its own server
ensure_temporal_cli
ensure_chromium
if [ $# -eq 0 ]; then
  # What talks to the Temporal server; replays and the fast tier's files don't depend on the backend.
  set -- test/orders/*.test.ts test/api/outbox.test.ts test/processes/*.test.ts test/ui/*.test.ts \
    test/devserver/temporal-server.test.ts \
    --project integration --exclude test/orders/replay.test.ts
fi
exec npx vitest run "$@"
