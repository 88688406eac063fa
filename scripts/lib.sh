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

ensure_chromium() {
  # The Temporal UI browser check drives Debian's Chromium (no browser download at run time).
  if [ -n "${CHROMIUM_PATH:-}" ] || command -v chromium >/dev/null 2>&1; then
    return 0
  fi
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "[setup] installing Debian's chromium for the Temporal UI browser check..."
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "[setup] warning: no chromium found; the Temporal UI browser check will fail." >&2
    echo "[setup] install it (apt-get install chromium) or set CHROMIUM_PATH." >&2
  fi
}
