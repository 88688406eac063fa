/**
 * Webhook secret rotation (issue #24, item 10): while WEBHOOK_SECRET_PREVIOUS
 * is set, the API accepts events signed with it or with WEBHOOK_SECRET; once
 * it is removed, only the current secret verifies. A published example value
 * is never accepted as the previous secret where the API may be exposed.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../../src/config.ts';
import { PUBLISHED_CREDENTIALS } from '../../src/config/credentials.ts';
import { signWebhook } from '../../src/providers/webhook-signature.ts';
import { uniq } from '../support/env.ts';
import { PROBLEM, call, startApi, type TestApi } from './support.ts';

const CURRENT = 'whsec_rotation_current_9f2c41d7';
const PREVIOUS = 'whsec_rotation_previous_5b8e03a6';

function deliver(api: TestApi, secret: string) {
  // An event for an order that does not exist: acknowledged (200) once its signature verifies.
  const raw = JSON.stringify({
    id: `evt_${uniq('e')}`,
    type: 'charge.succeeded',
    data: { object: { id: 'ch_rotation', metadata: { order_id: 'ord_none', tenant_id: 'nobody' } } },
  });
  return call(api, 'POST', '/v1/webhooks/payments', {
    raw,
    headers: { 'onceflow-signature': signWebhook(secret, raw, Math.floor(Date.now() / 1000)) },
  });
}

describe('webhook secret rotation', () => {
  let rotating: TestApi;
  let rotated: TestApi;

  beforeAll(async () => {
    rotating = await startApi({ env: { WEBHOOK_SECRET: CURRENT, WEBHOOK_SECRET_PREVIOUS: PREVIOUS } });
    rotated = await startApi({ env: { WEBHOOK_SECRET: CURRENT } });
  });
  afterAll(async () => {
    await rotating?.close();
    await rotated?.close();
  });

  it('accepts the previous secret while it is configured, and refuses it once it is removed', async () => {
    for (const secret of [CURRENT, PREVIOUS]) {
      const res = await deliver(rotating, secret);
      expect(res.status).toBe(200);
      expect(res.body).toMatchObject({ received: true, outcome: 'ignored_unknown_order' });
    }
    expect((await deliver(rotated, CURRENT)).status).toBe(200);
    const refused = await deliver(rotated, PREVIOUS);
    expect(refused.status).toBe(401);
    expect(refused.body).toMatchObject({ type: `${PROBLEM}invalid-webhook-signature` });
  });

  it('an event signed with neither secret is 401', async () => {
    for (const api of [rotating, rotated]) {
      const res = await deliver(api, 'whsec_neither_of_them_7d1a');
      expect(res.status).toBe(401);
      expect(res.body).toMatchObject({ type: `${PROBLEM}invalid-webhook-signature` });
    }
  });

  it('WEBHOOK_SECRET_PREVIOUS: optional; a published example value is refused where the API may be exposed', () => {
    expect(loadConfig({}).webhookSecretPrevious).toBeNull();
    expect(loadConfig({ WEBHOOK_SECRET_PREVIOUS: '' }).webhookSecretPrevious).toBeNull();
    expect(loadConfig({ WEBHOOK_SECRET_PREVIOUS: PREVIOUS }).webhookSecretPrevious).toBe(PREVIOUS);
    const exposed = { BIND_HOST: '0.0.0.0', WEBHOOK_SECRET: CURRENT };
    expect(loadConfig({ ...exposed, WEBHOOK_SECRET_PREVIOUS: PREVIOUS }).webhookSecretPrevious).toBe(
      PREVIOUS,
    );
    for (const published of PUBLISHED_CREDENTIALS.webhookSecret.published) {
      const config = loadConfig({ ...exposed, WEBHOOK_SECRET_PREVIOUS: published });
      expect(() => config.webhookSecretPrevious).toThrow(ConfigError);
      expect(() => config.webhookSecretPrevious).toThrow(/WEBHOOK_SECRET_PREVIOUS is set to a published/);
      // On loopback it is the local default by another name, as for WEBHOOK_SECRET.
      expect(loadConfig({ WEBHOOK_SECRET_PREVIOUS: published }).webhookSecretPrevious).toBe(published);
    }
  });
});
