# Shared helpers for the project's shell entry points.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

ensure_node_modules() {
  # Install when node_modules is missing or older than the lockfile.
  if [ ! -d node_modules ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
    echo "[setup] installing npm dependencies (npm ci)..."
    npm ci --no-audit --no-fund
  fi
}

ensure_temporal_cli() {
  if [ -n "${TEMPORAL_ADDRESS:-}" ]; then
    return 0 # an external server; no CLI needed
  fi
  node --import tsx scripts/ensure-temporal.ts >/dev/null
}
