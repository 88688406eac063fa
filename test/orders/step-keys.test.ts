import { describe, expect, it } from 'vitest';
import { stepKeys } from '../../src/orders/model.ts';

describe("the order workflow's step keys", () => {
  it('are derived exactly as the recorded histories hold them, through the core package', () => {
    const wf = 'order/acme/ord-1';
    expect(stepKeys.charge(wf)).toBe(`${wf}/charge`);
    expect(stepKeys.receipt(wf)).toBe(`${wf}/receipt`);
    expect(stepKeys.status(wf, 'paid')).toBe(`${wf}/status/paid`);
    expect(stepKeys.status(wf, 'needs_attention', 2)).toBe(`${wf}/status/needs_attention/redrive-2`);
  });
});
