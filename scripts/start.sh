#!/usr/bin/env bash
# README command 1: bring the whole system up (Temporal dev server unless
# TEMPORAL_ADDRESS is set, Postgres checked and migrated, sandbox providers,
# worker, API). Ctrl-C stops everything.
source "$(dirname "$0")/lib.sh"
ensure_node_modules
exec node --import tsx dev/start.ts "$@"
