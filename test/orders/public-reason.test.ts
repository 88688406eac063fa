/** The reason code and message a tenant sees (publicReason): pure, no services. */
import { expect, it } from 'vitest';
import { ORDER_REASONS, ORDER_REASON_MESSAGES, publicReason } from '../../src/orders/model.ts';

it('every reason code the workflow writes has a safe message', () => {
  const codes = Object.values(ORDER_REASONS).map((r) => (typeof r === 'function' ? r('some_detail') : r));
  for (const code of codes) {
    const shown = publicReason('needs_attention', code);
    expect(shown.reason, code).toBe(code);
    expect(Object.values(ORDER_REASON_MESSAGES), code).toContain(shown.message);
  }
});

it('keeps a plain-code detail, cuts any other detail to the family, and hides unknown codes', () => {
  expect(publicReason('rejected', 'decline_code:insufficient_funds')).toEqual({
    reason: 'decline_code:insufficient_funds',
    message: ORDER_REASON_MESSAGES.decline_code,
  });
  expect(publicReason('rejected', 'decline_code:<script>alert(1)</script>').reason).toBe('decline_code');
  expect(publicReason('needs_attention', 'charge_failed:connect ECONNREFUSED 10.0.0.7:4010').reason).toBe(
    'charge_failed',
  );
  expect(publicReason('needs_attention', 'constructor')).toEqual({
    reason: null,
    message: 'The order needs attention from our team.',
  });
  expect(publicReason('rejected', null)).toEqual({ reason: null, message: 'The order was rejected.' });
  expect(publicReason('completed', null)).toEqual({ reason: null, message: null });
});
