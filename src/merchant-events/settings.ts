/** The environment of merchant webhooks, read by both processes' config (src/config.ts). */
export interface WebhookSettings {
  /** http URLs and loopback/private addresses: on by default only while the process is not exposed. */
  allowPrivate: boolean;
  /** How long a delivery is retried before it is marked failed (WEBHOOK_RETRY_WINDOW_MS, default 3 days). */
  retryWindowMs: number;
  /** The first retry's delay (WEBHOOK_FIRST_RETRY_MS, default 5 s); later ones double, with jitter, up to 1 h. */
  firstRetryMs: number;
}

const DAY_MS = 24 * 60 * 60 * 1000;

function positiveInt(env: NodeJS.ProcessEnv, name: string, fallback: number): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  const n = Number(raw);
  if (!Number.isSafeInteger(n) || n <= 0)
    throw new Error(`${name} must be a positive integer (ms), got "${raw}"`);
  return n;
}

/**
 * WEBHOOK_ALLOW_PRIVATE_URLS=true|false. Unset: allowed on loopback (local development, `npm start`),
 * refused when the process is exposed; set true while exposed, it is refused (a public default).
 */
export function readWebhookSettings(
  env: NodeJS.ProcessEnv,
  exposure: { exposed: boolean; reasons: string[] },
): WebhookSettings {
  const raw = env.WEBHOOK_ALLOW_PRIVATE_URLS;
  if (raw !== undefined && raw !== '' && raw !== 'true' && raw !== 'false')
    throw new Error(`WEBHOOK_ALLOW_PRIVATE_URLS must be true or false, got "${raw}"`);
  const allowPrivate = raw === undefined || raw === '' ? !exposure.exposed : raw === 'true';
  if (allowPrivate && exposure.exposed) {
    throw new Error(
      `WEBHOOK_ALLOW_PRIVATE_URLS=true lets tenants point webhooks at this network, and the process is ` +
        `exposed (${exposure.reasons.join('; ')}). Unset it in production.`,
    );
  }
  return {
    allowPrivate,
    retryWindowMs: positiveInt(env, 'WEBHOOK_RETRY_WINDOW_MS', 3 * DAY_MS),
    firstRetryMs: positiveInt(env, 'WEBHOOK_FIRST_RETRY_MS', 5_000),
  };
}
