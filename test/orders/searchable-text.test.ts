/**
 * The OrderLastError search attribute must be a value the Temporal server on
 * Postgres can store: it keeps Text attributes as `tsvector`, and a value it
 * cannot parse makes the visibility update fail (and retry) forever, so the
 * parked order never appears in visibility queries. Checked against a real
 * Postgres `::tsvector` cast.
 */
import { afterAll, describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { LAST_ERROR_MAX_CHARS, searchableText } from '../../src/orders/contract.ts';
import { testPool } from '../support/env.ts';

const pool = testPool(2);
afterAll(() => pool.end());

async function tsvectorAccepts(value: string): Promise<boolean> {
  try {
    await pool.query('select $1::tsvector', [value]);
    return true;
  } catch {
    return false;
  }
}

describe('searchableText (OrderLastError)', () => {
  it('turns the messages that broke Postgres visibility into values it stores, keeping their words', async () => {
    const raw = 'status paid could not be recorded: order acme/ord-1 does not exist';
    expect(await tsvectorAccepts(raw)).toBe(false); // what the server choked on
    const value = searchableText(raw);
    expect(await tsvectorAccepts(value)).toBe(true);
    expect(value).toBe('status paid could not be recorded order acme/ord-1 does not exist');
    for (const nasty of [
      "it's broken",
      'C:\\path\\to',
      'word:12A',
      'a\u0000b',
      '🙂'.repeat(2000),
      'x'.repeat(5000),
    ]) {
      expect(await tsvectorAccepts(searchableText(nasty)), JSON.stringify(nasty.slice(0, 40))).toBe(true);
    }
  });

  it('any message becomes a value tsvector accepts, at most LAST_ERROR_MAX_CHARS code points of words', async () => {
    await fc.assert(
      fc.asyncProperty(fc.string({ unit: 'binary', maxLength: 1500 }), async (message) => {
        const value = searchableText(message);
        expect(await tsvectorAccepts(value)).toBe(true);
        expect(Array.from(value.replace(/ /g, '')).length).toBeLessThanOrEqual(LAST_ERROR_MAX_CHARS);
      }),
      { numRuns: 300 },
    );
  });
});
