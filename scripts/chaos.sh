#!/usr/bin/env bash
# `npm run chaos`: the fault matrix (scripts/chaos.ts) on a throwaway stack.
# Dependencies and the Temporal CLI are found (or built) the same way as for `npm start`.
source "$(dirname "$0")/lib.sh"
# Help and usage errors need neither dependencies checked nor a Temporal CLI built.
for arg in "$@"; do
  case "$arg" in -h | --help) exec node --import tsx scripts/chaos.ts "$@" ;; esac
done
ensure_node_modules
unset TEMPORAL_ADDRESS # the run always starts (and kills) a Temporal dev server of its own
ensure_temporal_cli
exec node --import tsx scripts/chaos.ts "$@"
