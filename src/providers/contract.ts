/** What the product assumes about every provider (workflow-safe). */

/** How long a provider remembers an idempotency key: past it, the same key could charge again. */
export const PROVIDER_KEY_WINDOW_MS = 24 * 60 * 60 * 1000;
