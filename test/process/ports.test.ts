/**
 * freePortRange (src/process/ports.ts): consecutive ports for a process that derives its other
 * ports from the first, drawn below the kernels' ephemeral ranges, never handed out twice.
 */
import { expect, it } from 'vitest';
import { assertPortFree, freePortRange } from '../../src/process/ports.ts';

it('hands out bindable consecutive ports below the ephemeral ranges, never the same ones twice', async () => {
  const a = await freePortRange(4);
  const b = await freePortRange(4);
  for (const base of [a, b]) {
    expect(base).toBeGreaterThanOrEqual(20_000);
    expect(base + 3).toBeLessThanOrEqual(32_767);
    for (let p = base; p < base + 4; p++) await assertPortFree(p, `port ${p}`);
  }
  // The two ranges do not overlap.
  expect(Math.abs(a - b)).toBeGreaterThanOrEqual(4);
});
