/** The resource stack every composition root uses: reverse order, and a failing close does not stop the rest. */
import { expect, it } from 'vitest';
import { Resources } from '../../src/process/resources.ts';

it('closes in reverse order of opening, once, even when one close fails', async () => {
  const closed: string[] = [];
  const r = new Resources();
  const pool = r.add('pool', { id: 'pool' }, (p) => void closed.push(p.id));
  expect(pool).toEqual({ id: 'pool' });
  r.add('metrics server', 'metrics', async (m) => {
    closed.push(m);
    throw new Error('close failed');
  });
  r.add('connection', 'connection', async (c) => void closed.push(c));
  const [first, second] = await Promise.all([r.closeAll(), r.closeAll()]);
  expect(first).toBe(false);
  expect(second).toBe(false);
  expect(closed).toEqual(['connection', 'metrics', 'pool']);
  expect(() => r.add('late', 1, () => undefined)).toThrow(/closing/);
});
