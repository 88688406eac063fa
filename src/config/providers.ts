/** PAYMENT_PROVIDER, EMAIL_PROVIDER and their settings (docs/PROVIDERS.md), read by `loadConfig` (src/config.ts). */

import { ConfigError } from './error.ts';
import { duration, oneOf, port } from './env.ts';

export interface ProvidersConfig {
  /** PAYMENT_PROVIDER: `sandbox` (default) or `stripe`. */
  payment: 'sandbox' | 'stripe';
  /** EMAIL_PROVIDER: `sandbox` (default) or `smtp`. */
  email: 'sandbox' | 'smtp';
  stripe: {
    /** STRIPE_SECRET_KEY; unset: the sandbox's test key. A live key needs ONCEFLOW_ALLOW_LIVE=1. */
    secretKey: string;
    /** STRIPE_API_BASE: where the Stripe API is (a local test server); unset with a real key: api.stripe.com. */
    apiBase: string | undefined;
    /** STRIPE_WEBHOOK_SECRET; null: the sandbox signs, so WEBHOOK_SECRET verifies. */
    webhookSecret: string | null;
    /** STRIPE_KEY_WINDOW_MS: how long Stripe keeps idempotency keys (24 h; shortened against a test server). */
    keyWindowMs: number;
    /** STRIPE_SEARCH_LAG_MS: how far Stripe's search may lag behind writes (1 h, its worst case in incidents). */
    searchLagMs: number;
  };
  smtp: {
    /** SMTP_URL, e.g. smtps://user:pass@smtp.example.com:465; default the local dev server (SMTP_PORT, 2525). */
    url: string;
    /** RECEIPT_FROM: the receipts' From address. */
    from: string;
    /** RECEIPT_UNCERTAIN_POLICY: `at_least_once` (default) or `at_most_once`. */
    uncertainPolicy: 'at_least_once' | 'at_most_once';
  };
}

/** The test key the sandbox's Stripe surface accepts; never a real credential. */
export const SANDBOX_STRIPE_KEY = 'sk_test_onceflow_sandbox';

function httpUrl(name: string, raw: string): string {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new ConfigError(`${name} must be an http(s) URL, got ${JSON.stringify(raw)}`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new ConfigError(`${name} must be an http(s) URL, got ${JSON.stringify(raw)}`);
  }
  return raw;
}

export function providersConfig(env: NodeJS.ProcessEnv, sandboxUrl: string): ProvidersConfig {
  const payment = oneOf(env, 'PAYMENT_PROVIDER', ['sandbox', 'stripe'] as const, 'sandbox');
  const email = oneOf(env, 'EMAIL_PROVIDER', ['sandbox', 'smtp'] as const, 'sandbox');
  const givenKey = env.STRIPE_SECRET_KEY?.trim() || undefined;
  if (givenKey !== undefined) {
    if (!/^(sk|rk)_(test|live)_[A-Za-z0-9_]+$/.test(givenKey)) {
      throw new ConfigError(
        'STRIPE_SECRET_KEY must be a Stripe secret or restricted key (sk_test_..., rk_test_...); ' +
          'copy it from the Stripe dashboard, Developers > API keys',
      );
    }
    // Real money moves with a live key: only on purpose.
    if (/^(sk|rk)_live_/.test(givenKey) && env.ONCEFLOW_ALLOW_LIVE !== '1') {
      throw new ConfigError(
        'STRIPE_SECRET_KEY is a live key (real charges); use a test key (sk_test_...), ' +
          'or set ONCEFLOW_ALLOW_LIVE=1 if you really mean to move money',
      );
    }
  }
  const apiBaseRaw = env.STRIPE_API_BASE?.trim() || undefined;
  // No key: the sandbox's Stripe surface, with its test key.
  const apiBase = apiBaseRaw ? httpUrl('STRIPE_API_BASE', apiBaseRaw) : givenKey ? undefined : sandboxUrl;
  const webhookSecret = env.STRIPE_WEBHOOK_SECRET?.trim() || null;
  if (payment === 'stripe' && givenKey !== undefined && apiBase === undefined && webhookSecret === null) {
    throw new ConfigError(
      'PAYMENT_PROVIDER=stripe with a STRIPE_SECRET_KEY needs STRIPE_WEBHOOK_SECRET (the webhook ' +
        "endpoint's signing secret, whsec_...), or payment events can't be verified",
    );
  }
  const smtpPort = port(env, 'SMTP_PORT', 2525);
  const smtpUrl = env.SMTP_URL?.trim() || `smtp://127.0.0.1:${smtpPort}`;
  if (!/^smtps?:\/\//.test(smtpUrl)) {
    throw new ConfigError(`SMTP_URL must be an smtp:// or smtps:// URL, got ${JSON.stringify(smtpUrl)}`);
  }
  const from = env.RECEIPT_FROM?.trim() || 'Onceflow receipts <receipts@onceflow.invalid>';
  if (/[\r\n]/.test(from)) throw new ConfigError('RECEIPT_FROM must be one line');
  return {
    payment,
    email,
    stripe: {
      secretKey: givenKey ?? SANDBOX_STRIPE_KEY,
      apiBase,
      webhookSecret,
      keyWindowMs: duration(env, 'STRIPE_KEY_WINDOW_MS', 24 * 60 * 60 * 1000),
      searchLagMs: duration(env, 'STRIPE_SEARCH_LAG_MS', 60 * 60 * 1000),
    },
    smtp: {
      url: smtpUrl,
      from,
      uncertainPolicy: oneOf(
        env,
        'RECEIPT_UNCERTAIN_POLICY',
        ['at_least_once', 'at_most_once'] as const,
        'at_least_once',
      ),
    },
  };
}
