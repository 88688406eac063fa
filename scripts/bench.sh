#!/usr/bin/env bash
# `npm run bench:<name>`: bench/<name>.ts with dependencies installed the same way as for
# `npm start`, so a benchmark runs on a fresh clone. Each benchmark builds the tools it needs
# (the Temporal CLI, or the Temporal server for --backend=postgres) and starts its own stack.
source "$(dirname "$0")/lib.sh"
name="$1"
shift
ensure_node_modules
exec node --import tsx "bench/$name.ts" "$@"
