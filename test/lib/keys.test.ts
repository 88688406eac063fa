import { describe, expect, it } from 'vitest';
import { stepKey } from '../../src/lib/keys.ts';
import { stepKeys } from '../../src/orders/model.ts';

describe('stepKey', () => {
  it('joins the workflow ID, the step and its parts with "/"', () => {
    expect(stepKey('renewal/acme/sub_1/2026-12', 'charge')).toBe('renewal/acme/sub_1/2026-12/charge');
    expect(stepKey('wf', 'status', 'paid', 'redrive-2')).toBe('wf/status/paid/redrive-2');
    expect(stepKey('wf', 'attempt', 3)).toBe('wf/attempt/3');
  });

  it('refuses a step name or part with "/" or outside visible ASCII, so two steps never share a key', () => {
    expect(() => stepKey('wf', 'a/b')).toThrow(TypeError);
    expect(() => stepKey('wf', 'status', 'x/y')).toThrow(TypeError);
    expect(() => stepKey('wf', '')).toThrow(TypeError);
    expect(() => stepKey('wf', 'caf\u00e9')).toThrow(TypeError);
  });

  it("derives the order workflow's keys exactly as before it moved to the library (recorded histories hold them)", () => {
    const wf = 'order/acme/ord-1';
    expect(stepKeys.charge(wf)).toBe(`${wf}/charge`);
    expect(stepKeys.receipt(wf)).toBe(`${wf}/receipt`);
    expect(stepKeys.status(wf, 'paid')).toBe(`${wf}/status/paid`);
    expect(stepKeys.status(wf, 'needs_attention', 2)).toBe(`${wf}/status/needs_attention/redrive-2`);
  });
});
