/** PAYMENT_PROVIDER / EMAIL_PROVIDER and their settings (src/config.ts): defaults, and what is refused. */
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.ts';
import { refusedConfig as refused } from '../support/config.ts';
import { SANDBOX_STRIPE_KEY } from '../../src/config/providers.ts';

describe('provider config', () => {
  it('defaults to the sandbox for both', () => {
    const p = loadConfig({}).providers;
    expect(p).toMatchObject({ payment: 'sandbox', email: 'sandbox' });
  });

  it('stripe without a key points at the sandbox Stripe surface with its test key', () => {
    const p = loadConfig({ PAYMENT_PROVIDER: 'stripe', SANDBOX_PORT: '4999' }).providers;
    expect(p.payment).toBe('stripe');
    expect(p.stripe).toMatchObject({
      secretKey: SANDBOX_STRIPE_KEY,
      apiBase: 'http://127.0.0.1:4999',
      webhookSecret: null,
      keyWindowMs: 24 * 60 * 60 * 1000,
      searchLagMs: 60 * 60 * 1000,
    });
  });

  it('a real test key goes to api.stripe.com and needs the endpoint secret', () => {
    expect(refused({ PAYMENT_PROVIDER: 'stripe', STRIPE_SECRET_KEY: 'sk_test_abc123' })).toMatch(
      /STRIPE_WEBHOOK_SECRET/,
    );
    const p = loadConfig({
      PAYMENT_PROVIDER: 'stripe',
      STRIPE_SECRET_KEY: 'sk_test_abc123',
      STRIPE_WEBHOOK_SECRET: 'whsec_abc',
    }).providers.stripe;
    expect(p).toMatchObject({ secretKey: 'sk_test_abc123', apiBase: undefined, webhookSecret: 'whsec_abc' });
  });

  it('refuses a live key unless ONCEFLOW_ALLOW_LIVE=1', () => {
    for (const key of ['sk_live_abc123', 'rk_live_abc123']) {
      const env = { PAYMENT_PROVIDER: 'stripe', STRIPE_SECRET_KEY: key, STRIPE_WEBHOOK_SECRET: 'whsec_x' };
      expect(refused(env)).toMatch(/live key/);
      expect(refused({ ...env, ONCEFLOW_ALLOW_LIVE: 'yes' })).toMatch(/live key/);
      expect(loadConfig({ ...env, ONCEFLOW_ALLOW_LIVE: '1' }).providers.stripe.secretKey).toBe(key);
    }
    // Refused whichever provider is selected: a live key in the environment is a mistake either way.
    expect(refused({ STRIPE_SECRET_KEY: 'sk_live_abc123' })).toMatch(/live key/);
  });

  it('refuses what is not a Stripe key, an unknown provider, and a bad API base', () => {
    expect(refused({ STRIPE_SECRET_KEY: 'pk_test_abc' })).toMatch(/STRIPE_SECRET_KEY/);
    expect(refused({ PAYMENT_PROVIDER: 'paypal' })).toMatch(
      /PAYMENT_PROVIDER must be one of sandbox, stripe/,
    );
    expect(refused({ EMAIL_PROVIDER: 'sendgrid' })).toMatch(/EMAIL_PROVIDER must be one of sandbox, smtp/);
    expect(refused({ STRIPE_API_BASE: 'ftp://x' })).toMatch(/STRIPE_API_BASE/);
    expect(refused({ STRIPE_KEY_WINDOW_MS: '-1' })).toMatch(/STRIPE_KEY_WINDOW_MS/);
  });

  it('smtp defaults to the local dev server and at-least-once receipts', () => {
    const p = loadConfig({ EMAIL_PROVIDER: 'smtp', SMTP_PORT: '2600' }).providers;
    expect(p.email).toBe('smtp');
    expect(p.smtp).toMatchObject({ url: 'smtp://127.0.0.1:2600', uncertainPolicy: 'at_least_once' });
    expect(p.smtp.from).toMatch(/@/);
    const q = loadConfig({
      SMTP_URL: 'smtps://u:p@mail.example.com:465',
      RECEIPT_FROM: 'shop@example.com',
      RECEIPT_UNCERTAIN_POLICY: 'at_most_once',
    }).providers.smtp;
    expect(q).toEqual({
      url: 'smtps://u:p@mail.example.com:465',
      from: 'shop@example.com',
      uncertainPolicy: 'at_most_once',
    });
    expect(refused({ SMTP_URL: 'http://x' })).toMatch(/SMTP_URL/);
    expect(refused({ RECEIPT_UNCERTAIN_POLICY: 'maybe' })).toMatch(/RECEIPT_UNCERTAIN_POLICY/);
  });
});
