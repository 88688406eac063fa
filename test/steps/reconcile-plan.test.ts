/**
 * The reconcile plan (src/steps/reconcile-plan.ts): which question each provider is
 * asked about an uncertain outcome, and when a search's "not found" proves
 * anything. Pure decisions; the end-to-end cases run against the sandbox's
 * Stripe surface in test/providers/stripe-order.test.ts.
 */
import { describe, expect, it } from 'vitest';
import { planReconcile } from '../../src/steps/reconcile-plan.ts';
import { SANDBOX_CAPABILITIES } from '../../src/providers/sandbox.ts';
import type { ProviderCapabilities } from '../../src/providers/types.ts';

const H = 60 * 60 * 1000;
const stripeLike: ProviderCapabilities = {
  keyWindowMs: 24 * H,
  withinWindow: 'replay',
  afterWindow: { kind: 'search', lagMs: H },
};
const smtpLike: ProviderCapabilities = {
  keyWindowMs: null,
  withinWindow: 'none',
  afterWindow: { kind: 'none' },
};
const now = Date.UTC(2026, 0, 2);
const createdAgo = (ms: number) => ({ createdAt: new Date(now - ms) });

describe('planReconcile', () => {
  it('asks a lookup provider by key, inside and after its window', () => {
    expect(planReconcile(SANDBOX_CAPABILITIES, createdAgo(H), { canReplay: true, nowMs: now })).toEqual({
      kind: 'lookup',
    });
    expect(planReconcile(SANDBOX_CAPABILITIES, createdAgo(48 * H), { canReplay: true, nowMs: now })).toEqual({
      kind: 'lookup',
    });
  });

  it('replays under the same key inside the window when the request is at hand', () => {
    expect(planReconcile(stripeLike, createdAgo(H), { canReplay: true, nowMs: now })).toEqual({
      kind: 'replay',
    });
  });

  it('never replays at the edge of the window (the guard keeps a margin) or after it', () => {
    // Margin: a tenth of the window, at most an hour; 23.5 h old is inside the last hour.
    for (const age of [23.5 * H, 25 * H, 72 * H]) {
      expect(planReconcile(stripeLike, createdAgo(age), { canReplay: true, nowMs: now }).kind).toBe('search');
    }
  });

  it('inside the window without the request: searches, and "not found" may lead to a perform (a replay)', () => {
    expect(planReconcile(stripeLike, createdAgo(H), { canReplay: false, nowMs: now })).toEqual({
      kind: 'search',
      notFoundIsProof: false,
      notFoundMayPerform: true,
    });
  });

  it('after the window, "not found" is proof only once the lag has passed since the window closed', () => {
    // Window closed 30 min ago: a request sent just before may not be searchable yet.
    expect(planReconcile(stripeLike, createdAgo(24.5 * H), { canReplay: true, nowMs: now })).toEqual({
      kind: 'search',
      notFoundIsProof: false,
      notFoundMayPerform: false,
    });
    expect(planReconcile(stripeLike, createdAgo(25 * H), { canReplay: true, nowMs: now })).toEqual({
      kind: 'search',
      notFoundIsProof: true,
      notFoundMayPerform: false,
    });
  });

  it('a shortened window (tests, config) moves both edges', () => {
    const opts = { keyWindowMs: 10_000, canReplay: true, nowMs: now };
    expect(planReconcile(stripeLike, createdAgo(5_000), opts).kind).toBe('replay');
    expect(planReconcile(stripeLike, createdAgo(20_000), opts)).toMatchObject({ notFoundIsProof: false });
    expect(planReconcile(stripeLike, createdAgo(10_000 + H), opts)).toMatchObject({ notFoundIsProof: true });
  });

  it('a record of unknown age proves nothing; no claim at all means nothing was sent recently', () => {
    expect(planReconcile(stripeLike, undefined, { canReplay: true, nowMs: now })).toEqual({
      kind: 'search',
      notFoundIsProof: false,
      notFoundMayPerform: false,
    });
    expect(planReconcile(stripeLike, 'no_claim', { canReplay: false, nowMs: now })).toEqual({
      kind: 'search',
      notFoundIsProof: true,
      notFoundMayPerform: true,
    });
  });

  it('SMTP can never be asked', () => {
    expect(planReconcile(smtpLike, createdAgo(1), { canReplay: true, nowMs: now })).toEqual({ kind: 'none' });
  });
});
