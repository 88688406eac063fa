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
  # With TEMPORAL_BACKEND=postgres this also builds the Temporal server, its SQL tool and the UI server.
  node --import tsx scripts/ensure-temporal.ts >/dev/null
}

ensure_temporal_server() {
  # The Temporal server on Postgres, its SQL tool and the UI server (built on first use).
  TEMPORAL_BACKEND=postgres node --import tsx scripts/ensure-temporal.ts >/dev/null
}

# Installs a Debian package when running as root with apt-get. Non-zero when
# it can't (not root, no apt-get) or the install failed; callers run it under
# `if`, where `set -e` does not apply, so the status is returned explicitly.
apt_install_as_root() {
  local pkg="$1" why="$2"
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    return 1
  fi
  echo "[setup] installing Debian's $pkg $why..."
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$pkg" >/dev/null
}

ensure_chromium() {
  # The Temporal UI browser check drives Debian's Chromium (no browser download at run time).
  if [ -n "${CHROMIUM_PATH:-}" ] || command -v chromium >/dev/null 2>&1; then
    return 0
  fi
  # Homebrew's cask installs an app bundle, not a command on the PATH.
  if [ -x /Applications/Chromium.app/Contents/MacOS/Chromium ]; then
    export CHROMIUM_PATH=/Applications/Chromium.app/Contents/MacOS/Chromium
    return 0
  fi
  if ! apt_install_as_root chromium "for the Temporal UI browser check"; then
    # One line, with the command for each platform: the UI test then fails (it never skips).
    echo "[setup] no Chromium for the Temporal UI browser check: install it (Debian: sudo apt-get install chromium; macOS: brew install --cask chromium) or set CHROMIUM_PATH." >&2
  fi
}

# What npm test runs a second time (scripts/test-rerun.sh). The order and refund workflows' tests
# depend on both the Temporal server's backend and the provider adapters.
WORKFLOW_TESTS=(
  test/orders/{order-workflow,order-faults,parking,worker-crash,takeover-rejection,api-reasons}.test.ts
  test/orders/{refund-workflow,refund-worker-crash}.test.ts
)
# Also on the backend: Worker Versioning, the outbox's starts, visibility, the UI, the server itself.
BACKEND_TESTS=(
  "${WORKFLOW_TESTS[@]}" test/orders/deploy-versions.test.ts
  test/api/outbox.test.ts test/processes/join.test.ts test/ui/temporal-ui.test.ts
  test/devserver/temporal-server.test.ts
)
# Also on the provider adapters (sandbox clients, or Stripe and SMTP): the activities and webhooks.
PROVIDER_TESTS=("${WORKFLOW_TESTS[@]}" test/activities/*.test.ts test/api/refund-webhooks.test.ts)
