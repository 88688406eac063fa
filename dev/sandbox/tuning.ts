/**
 * Test knobs of the sandbox process, from its environment (dev only, never
 * the product's config): SANDBOX_KEY_WINDOW_MS shortens how long it keeps
 * idempotency keys (default 24 h, like Stripe), SANDBOX_SEARCH_LAG_MS delays
 * its Stripe surface's search index (default 0), so the chaos run and
 * `npm start` can play "the key window has passed and search lags".
 */
export function sandboxTuning(env: NodeJS.ProcessEnv): {
  keyRetentionMs?: number;
  stripeSearchLagMs?: number;
} {
  const out: { keyRetentionMs?: number; stripeSearchLagMs?: number } = {};
  const window = ms(env, 'SANDBOX_KEY_WINDOW_MS', 1);
  if (window !== undefined) out.keyRetentionMs = window;
  const lag = ms(env, 'SANDBOX_SEARCH_LAG_MS', 0);
  if (lag !== undefined) out.stripeSearchLagMs = lag;
  return out;
}

function ms(env: NodeJS.ProcessEnv, name: string, min: number): number | undefined {
  const raw = env[name];
  if (raw === undefined || raw === '') return undefined;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < min)
    throw new Error(`${name} must be an integer number of milliseconds >= ${min}`);
  return n;
}
