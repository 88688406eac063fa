/**
 * What the product assumes about every provider it calls, shared by the
 * workflow (its reconciliation horizon), the ledger (when an unknown outcome
 * may still be performed again under its key), retention (records must
 * outlive the keys) and the sandbox provider (how long it keeps keys).
 * Deterministic and I/O-free: workflow code imports it.
 */

/**
 * How long a provider remembers an idempotency key (the sandbox's, and
 * Stripe's: 24 h). Inside it, a retry under the same key replays the first
 * request's outcome; past it, the same key could charge again.
 */
export const PROVIDER_KEY_WINDOW_MS = 24 * 60 * 60 * 1000;
