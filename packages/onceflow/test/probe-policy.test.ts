import { describe, expect, it } from 'vitest';
import { PROBE_BREAK_EVEN, ReplayProbePolicy } from '../src/probe-policy.ts';

describe('ReplayProbePolicy', () => {
  it('starts every type fresh: no read first', () => {
    const policy = new ReplayProbePolicy();
    expect(policy.shouldProbe('order.create')).toBe(false);
  });

  it('reads first once a quarter of recent calls found their record, and stops when they no longer do', () => {
    const policy = new ReplayProbePolicy();
    const decisions: boolean[] = [];
    for (let i = 0; i < 4; i++) {
      policy.record('t', true);
      decisions.push(policy.shouldProbe('t'));
    }
    // 1/8, 15/64, 169/512 ...: the third replay in a row crosses 1/4.
    expect(decisions).toEqual([false, false, true, true]);
    let fresh = 0;
    while (policy.shouldProbe('t')) {
      policy.record('t', false);
      fresh++;
    }
    expect(fresh).toBeGreaterThan(3);
    expect(fresh).toBeLessThan(20);
  });

  it('keeps each operation type apart', () => {
    const policy = new ReplayProbePolicy();
    for (let i = 0; i < 10; i++) policy.record('replayed', true);
    expect(policy.shouldProbe('replayed')).toBe(true);
    expect(policy.shouldProbe('other')).toBe(false);
  });

  it('settles near the share of replays: above the break-even it probes, below it does not', () => {
    const run = (everyNth: number) => {
      const policy = new ReplayProbePolicy();
      const probed: boolean[] = [];
      for (let i = 0; i < 400; i++) {
        policy.record('t', i % everyNth === 0);
        probed.push(policy.shouldProbe('t'));
      }
      return probed.slice(200).filter(Boolean).length / 200;
    };
    expect(PROBE_BREAK_EVEN).toBe(0.25);
    expect(run(2)).toBe(1); // half the calls are replays: always read first
    expect(run(10)).toBe(0); // one in ten: never
  });

  it('forgets old types rather than grow without bound', () => {
    const policy = new ReplayProbePolicy();
    for (let i = 0; i < 10; i++) policy.record('hot', true);
    for (let i = 0; i < 2000; i++) policy.record(`type-${i}`, false);
    expect(policy.shouldProbe('hot')).toBe(false);
  });
});
