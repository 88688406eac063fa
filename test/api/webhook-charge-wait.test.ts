/**
 * chargeRecordSettled: how long a payment webhook waits for the charge's own
 * call to record its answer (src/api/routes/webhooks.ts, 5.). Driven by a
 * scripted sequence of ledger records, so each read is counted.
 */
import { describe, expect, it } from 'vitest';
import { chargeRecordSettled } from '../../src/api/routes/webhooks.ts';
import type { OperationRecord } from 'onceflow';
import { ConfigError, loadConfig } from '../../src/config.ts';

const record = (
  state: OperationRecord['state'],
  leaseExpiresAt: Date | null = new Date(Date.now() + 15_000),
) =>
  ({
    state,
    result: state === 'succeeded' ? { chargeId: 'ch_1' } : null,
    leaseExpiresAt: state === 'in_progress' ? leaseExpiresAt : null,
  }) as unknown as OperationRecord;

/** A read that returns the scripted records in turn (the last one repeats), counting reads. */
function script(...states: (OperationRecord['state'] | null)[]) {
  let reads = 0;
  const read = async () => {
    const state = states[Math.min(reads++, states.length - 1)];
    return state ? record(state) : null;
  };
  return { read, reads: () => reads };
}

describe('chargeRecordSettled', () => {
  it('re-reads an in-flight record until the call records its answer', async () => {
    const s = script('in_progress', 'in_progress', 'succeeded');
    expect(await chargeRecordSettled(s.read, 2_000)).toBe(true);
    expect(s.reads()).toBe(3);
  });

  it('a failed charge is a definite answer too', async () => {
    const s = script('in_progress', 'failed');
    expect(await chargeRecordSettled(s.read, 2_000)).toBe(true);
    expect(s.reads()).toBe(2);
  });

  it('does not wait on an unknown outcome or a missing record: the workflow needs the event', async () => {
    for (const state of ['unknown', null] as const) {
      const s = script(state, 'succeeded');
      expect(await chargeRecordSettled(s.read, 2_000)).toBe(false);
      expect(s.reads()).toBe(1);
    }
  });

  it('with no wait, or once the wait is over, an in-flight record is not settled', async () => {
    const none = script('in_progress', 'succeeded');
    expect(await chargeRecordSettled(none.read, 0)).toBe(false);
    expect(none.reads()).toBe(1);

    const never = script('in_progress');
    expect(await chargeRecordSettled(never.read, 50)).toBe(false);
    // Backoff from 10 ms: 10 + 20 + 20 (what is left of 50) -> a handful of reads, not a busy loop.
    expect(never.reads()).toBeGreaterThanOrEqual(2);
    expect(never.reads()).toBeLessThanOrEqual(5);
  });

  it('does not wait on a claim whose lease has run out: its owner died or paused', async () => {
    let reads = 0;
    const expired = async () =>
      reads++ === 0 ? record('in_progress', new Date(Date.now() - 1)) : record('succeeded');
    expect(await chargeRecordSettled(expired, 2_000)).toBe(false);
    expect(reads).toBe(1);
  });

  it('stops waiting when the sender has hung up', async () => {
    const s = script('in_progress', 'in_progress', 'succeeded');
    expect(await chargeRecordSettled(s.read, 2_000, () => true)).toBe(false);
    expect(s.reads()).toBe(1);
  });

  it('WEBHOOK_CHARGE_WAIT_MS: 1000 by default, 0 turns the wait off, more than 3000 or a non-integer is refused', () => {
    expect(loadConfig({}).api.webhookChargeWaitMs).toBe(1000);
    expect(loadConfig({ WEBHOOK_CHARGE_WAIT_MS: '0' }).api.webhookChargeWaitMs).toBe(0);
    expect(loadConfig({ WEBHOOK_CHARGE_WAIT_MS: '3000' }).api.webhookChargeWaitMs).toBe(3000);
    expect(() => loadConfig({ WEBHOOK_CHARGE_WAIT_MS: '5000' })).toThrow(
      /WEBHOOK_CHARGE_WAIT_MS must be at most 3000/,
    );
    for (const bad of ['-1', '1.5', 'soon']) {
      expect(() => loadConfig({ WEBHOOK_CHARGE_WAIT_MS: bad })).toThrow(ConfigError);
    }
  });
});
