#!/usr/bin/env bash
# The order and fault tests again through the real provider adapters: the
# Stripe adapter against the sandbox's Stripe surface, and receipts over SMTP
# to a local SMTP server (dev/mail), as `PAYMENT_PROVIDER=stripe
# EMAIL_PROVIDER=smtp npm start` runs them (docs/PROVIDERS.md). Effects are
# counted at the sandbox's audit endpoints and in the SMTP server's mailbox.
# Extra arguments go to vitest (e.g. a single file).
source "$(dirname "$0")/lib.sh"
ensure_node_modules
ensure_temporal_cli
export PAYMENT_PROVIDER=stripe EMAIL_PROVIDER=smtp
if [ $# -eq 0 ]; then
  set -- test/orders/order-workflow.test.ts test/orders/parking.test.ts test/orders/worker-crash.test.ts \
    test/orders/takeover-rejection.test.ts test/orders/api-reasons.test.ts test/activities/*.test.ts \
    test/orders/refund-workflow.test.ts test/orders/refund-worker-crash.test.ts test/api/refund-webhooks.test.ts
fi
exec npx vitest run "$@"
