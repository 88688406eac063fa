/** The per-address failure throttle (src/http/failure-throttle.ts) on its own: limits, windows, memory bound. */
import { describe, expect, it } from 'vitest';
import { FailureThrottle } from '../../src/http/failure-throttle.ts';

describe('FailureThrottle', () => {
  it('refuses an address after max failures until its window ends, then forgets it', () => {
    let now = 1_000_000;
    const t = new FailureThrottle({ max: 3, windowMs: 60_000, now: () => now });
    for (let i = 0; i < 3; i++) {
      expect(t.retryAfterSeconds('a')).toBe(0);
      t.fail('a');
    }
    expect(t.retryAfterSeconds('a')).toBe(60);
    expect(t.retryAfterSeconds('b')).toBe(0);
    now += 59_001;
    expect(t.retryAfterSeconds('a')).toBe(1);
    now += 1_000;
    expect(t.retryAfterSeconds('a')).toBe(0);
    expect(t.size).toBe(0);
  });

  it('forgive takes back a counted attempt (a credential that proved good)', () => {
    const t = new FailureThrottle({ max: 2, windowMs: 60_000 });
    t.fail('a');
    t.fail('a');
    t.forgive('a');
    expect(t.retryAfterSeconds('a')).toBe(0);
    t.forgive('a');
    expect(t.size).toBe(0);
  });

  it('tracks at most maxTrackedAddresses, forgetting the oldest window first', () => {
    const t = new FailureThrottle({ max: 1, windowMs: 60_000, maxTrackedAddresses: 100 });
    for (let i = 0; i < 10_000; i++) t.fail(`10.0.${i >> 8}.${i & 255}`);
    expect(t.size).toBe(100);
    expect(t.retryAfterSeconds('10.0.0.0')).toBe(0);
    expect(t.retryAfterSeconds(`10.0.${9_999 >> 8}.${9_999 & 255}`)).toBeGreaterThan(0);
  });
});
