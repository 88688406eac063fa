import { describe, expect, it } from 'vitest';
import { createHmac } from 'node:crypto';
import { signWebhook, verifyWebhook, WebhookSignatureError } from '../../src/providers/webhook-signature.ts';

const secret = 'whsec_unit';
const body = '{"id":"evt_1","type":"charge.succeeded"}';
const t = 1_800_000_000;

function reason(fn: () => unknown): string | undefined {
  try {
    fn();
    return undefined;
  } catch (err) {
    expect(err).toBeInstanceOf(WebhookSignatureError);
    return (err as WebhookSignatureError).reason;
  }
}

describe('webhook signatures', () => {
  it('signs Stripe style: t=<sec>,v1=<hex HMAC-SHA256(secret, "t.body")>', () => {
    const expected = createHmac('sha256', secret).update(`${t}.${body}`).digest('hex');
    expect(signWebhook(secret, body, t)).toBe(`t=${t},v1=${expected}`);
  });

  it('verifies a good signature within the tolerance', () => {
    const header = signWebhook(secret, body, t);
    expect(verifyWebhook(secret, body, header, { nowSec: t + 299 })).toEqual({ timestampSec: t });
    expect(verifyWebhook(secret, Buffer.from(body), header, { nowSec: t - 10 })).toEqual({ timestampSec: t });
    // Secret rotation: any matching v1 is enough.
    const other = signWebhook('whsec_old', body, t).split('v1=')[1];
    expect(verifyWebhook(secret, body, `t=${t},v1=${other},${header.split(',')[1]}`, { nowSec: t })).toEqual({
      timestampSec: t,
    });
  });

  it('rejects a wrong secret, a changed body or a changed timestamp as bad_signature', () => {
    const header = signWebhook(secret, body, t);
    expect(reason(() => verifyWebhook('whsec_wrong', body, header, { nowSec: t }))).toBe('bad_signature');
    expect(reason(() => verifyWebhook(secret, body + ' ', header, { nowSec: t }))).toBe('bad_signature');
    const shifted = header.replace(`t=${t}`, `t=${t + 1}`);
    expect(reason(() => verifyWebhook(secret, body, shifted, { nowSec: t }))).toBe('bad_signature');
  });

  it('rejects a stale or far-future timestamp', () => {
    const header = signWebhook(secret, body, t);
    expect(reason(() => verifyWebhook(secret, body, header, { nowSec: t + 301 }))).toBe('stale_timestamp');
    expect(reason(() => verifyWebhook(secret, body, header, { nowSec: t - 301 }))).toBe('stale_timestamp');
    expect(reason(() => verifyWebhook(secret, body, header, { nowSec: t + 50, toleranceSec: 10 }))).toBe(
      'stale_timestamp',
    );
  });

  it('rejects malformed headers', () => {
    const v1 = signWebhook(secret, body, t).split(',')[1]!;
    for (const header of [
      undefined,
      '',
      'garbage',
      `t=abc,${v1}`,
      `t=${t}`,
      v1,
      `t=${t},v1=zz`,
      ['a', 'b'],
    ]) {
      expect(reason(() => verifyWebhook(secret, body, header, { nowSec: t }))).toBe('malformed');
    }
  });
  it('verifies with any of several secrets (a rotation window): the current one, the previous one, not a third', () => {
    const previous = 'whsec_previous';
    const both = [secret, previous] as const;
    expect(verifyWebhook(both, body, signWebhook(secret, body, t), { nowSec: t })).toEqual({
      timestampSec: t,
    });
    expect(verifyWebhook(both, body, signWebhook(previous, body, t), { nowSec: t })).toEqual({
      timestampSec: t,
    });
    expect(reason(() => verifyWebhook(both, body, signWebhook('whsec_other', body, t), { nowSec: t }))).toBe(
      'bad_signature',
    );
    // Once the previous secret is dropped, its signatures no longer verify.
    expect(reason(() => verifyWebhook([secret], body, signWebhook(previous, body, t), { nowSec: t }))).toBe(
      'bad_signature',
    );
    // An empty secret list (or an empty secret) is a programming error, never "anything goes".
    expect(() => verifyWebhook([], body, signWebhook(secret, body, t), { nowSec: t })).toThrow(TypeError);
    expect(() => verifyWebhook([secret, ''], body, signWebhook(secret, body, t), { nowSec: t })).toThrow(
      TypeError,
    );
  });
});
