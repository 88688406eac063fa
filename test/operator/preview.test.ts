/**
 * The re-drive preview (src/operator/preview.ts): pure decisions from ledger
 * records and the providers' declared key windows.
 */
import { describe, expect, it } from 'vitest';
import type { OperationRecord } from 'onceflow';
import type { ProviderCapabilities } from '../../src/providers/types.ts';
import { keyWindowLeftMs, previewRedrive, type ProviderStep } from '../../src/operator/preview.ts';

const HOUR = 3_600_000;
const now = new Date('2026-12-02T12:00:00Z');
const stripeLike: ProviderCapabilities = {
  keyWindowMs: 24 * HOUR,
  withinWindow: 'replay',
  afterWindow: { kind: 'search', lagMs: 60_000 },
};
const smtpLike: ProviderCapabilities = {
  keyWindowMs: null,
  withinWindow: 'none',
  afterWindow: { kind: 'none' },
};

function record(state: OperationRecord['state'], ageMs: number, more: Partial<OperationRecord> = {}) {
  return {
    tenantId: 'acme',
    operationType: 'payment.charge',
    key: 'order/acme/ord_1/charge',
    fingerprint: 'f',
    schemaVersion: 1,
    state,
    ownerToken: null,
    leaseExpiresAt: null,
    attempts: 1,
    downstreamKey: 'acme:order/acme/ord_1/charge',
    providerRef: null,
    result: null,
    error: null,
    createdAt: new Date(now.getTime() - ageMs),
    updatedAt: now,
    completedAt: null,
    ...more,
  } satisfies OperationRecord;
}

const step = (rec: OperationRecord | undefined, capabilities = stripeLike): ProviderStep => ({
  name: 'charge',
  operationType: 'payment.charge',
  key: 'order/acme/ord_1/charge',
  record: rec,
  capabilities,
});

describe('previewRedrive', () => {
  it('replays settled steps and runs unclaimed ones', () => {
    const p = previewRedrive([step(record('succeeded', HOUR)), { ...step(undefined), name: 'receipt' }], now);
    expect(p.allowed).toBe(true);
    expect(p.steps.map((s) => [s.name, s.effect])).toEqual([
      ['charge', 'replay'],
      ['receipt', 'run'],
    ]);
  });

  it('an unknown outcome inside the window is reconciled first, with the window left', () => {
    const p = previewRedrive([step(record('unknown', 20 * HOUR))], now);
    expect(p.allowed).toBe(true);
    expect(p.steps[0]).toMatchObject({ effect: 'reconcile_first', keyWindowLeftMs: 4 * HOUR });
    expect(p.steps[0]!.explanation).toContain('4.0 h');
  });

  it('an unknown outcome past the window refuses the re-drive, pointing to reconcile', () => {
    const p = previewRedrive([step(record('unknown', 25 * HOUR))], now);
    expect(p.allowed).toBe(false);
    expect(p.steps[0]).toMatchObject({ effect: 'refused_past_window', keyWindowLeftMs: 0 });
    expect(p.refusal).toMatch(/reconcile it first/);
  });

  it('an expired lease is treated as unknown; a live one waits', () => {
    const expired = record('in_progress', 25 * HOUR, { leaseExpiresAt: new Date(now.getTime() - 1) });
    expect(previewRedrive([step(expired)], now).steps[0]!.effect).toBe('refused_past_window');
    const live = record('in_progress', 25 * HOUR, { leaseExpiresAt: new Date(now.getTime() + 5_000) });
    expect(previewRedrive([step(live)], now)).toMatchObject({ allowed: true, steps: [{ effect: 'wait' }] });
  });

  it('a provider without keys (SMTP) follows its policy and has no window', () => {
    const p = previewRedrive([step(record('unknown', 30 * HOUR), smtpLike)], now);
    expect(p).toMatchObject({ allowed: true, steps: [{ effect: 'reconcile_first', keyWindowLeftMs: null }] });
    expect(keyWindowLeftMs(smtpLike, record('unknown', 1), now)).toBeNull();
  });
});
