/** Property tests of canonicalisation, fingerprints, money and key validation (pure, no database). */
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { LedgerError, downstreamKey, type Json } from '../src/index.ts';
import { assertMinorUnits, canonicalJson, fingerprint, validateKey } from '../src/canonical.ts';

/** JSON values as callers produce them: finite numbers only, no -0 (it canonicalises to 0). */
const jsonValue: fc.Arbitrary<Json> = fc.letrec<{ value: Json }>((tie) => ({
  value: fc.oneof(
    { depthSize: 'small' },
    fc.constant(null),
    fc.boolean(),
    fc.integer(),
    fc.double({ noNaN: true, noDefaultInfinity: true }).filter((n) => !Object.is(n, -0)),
    fc.string({ unit: 'binary' }),
    fc.array(tie('value'), { maxLength: 4 }),
    fc.dictionary(fc.string({ unit: 'binary' }), tie('value'), { maxKeys: 5 }),
  ),
})).value;

const jsonObject = fc.dictionary(fc.string({ unit: 'binary' }), jsonValue, { minKeys: 1, maxKeys: 6 });

/**
 * Rebuilds every object with its keys inserted in a different order. Own
 * properties are defined (Object.fromEntries), never assigned: `out[k] = v`
 * with k = "__proto__" would set the prototype and drop the key, which
 * JSON.parse keeps as an own property (fast-check found `{"__proto__":false}`).
 */
function reorder(value: Json, seed: number): Json {
  if (Array.isArray(value)) return value.map((v, i) => reorder(v, seed + i));
  if (value === null || typeof value !== 'object') return value;
  const keys = Object.keys(value);
  const shuffled = keys
    .map((k, i) => ({ k, w: Math.sin(seed * 9973 + i * 7919) }))
    .sort((a, b) => a.w - b.w)
    .map((x) => x.k);
  return Object.fromEntries(shuffled.map((k) => [k, reorder(value[k] as Json, seed + 1)]));
}

const codeOf = (fn: () => unknown): string | undefined => {
  try {
    fn();
    return undefined;
  } catch (err) {
    return err instanceof LedgerError ? err.code : 'not-a-ledger-error';
  }
};

describe('canonicalJson', () => {
  it('does not depend on key order', () => {
    fc.assert(
      fc.property(jsonValue, fc.integer(), (value, seed) => {
        expect(canonicalJson(reorder(value, seed))).toBe(canonicalJson(value));
      }),
    );
  });

  it('does not depend on whitespace, and parses back to the same value', () => {
    fc.assert(
      fc.property(jsonValue, fc.integer({ min: 0, max: 8 }), (value, indent) => {
        const spaced = JSON.parse(JSON.stringify(value, null, indent)) as Json;
        const canonical = canonicalJson(value);
        expect(canonicalJson(spaced)).toBe(canonical);
        expect(canonical).not.toMatch(/^\s|\s$/);
        expect(JSON.parse(canonical)).toEqual(value);
      }),
    );
  });

  it('sorts keys and drops undefined properties', () => {
    expect(canonicalJson({ b: 1, a: [true, null, 'x'], c: { z: 1, y: undefined, x: 2 } })).toBe(
      '{"a":[true,null,"x"],"b":1,"c":{"x":2,"z":1}}',
    );
    expect(canonicalJson(-0)).toBe('0');
    expect(canonicalJson(Object.create(null) as object)).toBe('{}');
  });

  it('rejects what JSON cannot carry faithfully, with invalid_input', () => {
    const cyclic: Record<string, unknown> = {};
    cyclic.self = cyclic;
    const rejected: unknown[] = [
      Number.NaN,
      Infinity,
      -Infinity,
      undefined,
      [1, undefined],
      { f: () => 1 },
      { n: 10n },
      { s: Symbol('x') },
      { at: new Date(0) },
      new Map([['a', 1]]),
      new Set([1]),
      Buffer.from('x'),
      new (class Money {
        amount = 1;
      })(),
      cyclic,
    ];
    for (const value of rejected) expect(codeOf(() => canonicalJson(value))).toBe('invalid_input');
    // The same object twice (not a cycle) is fine.
    const shared = { a: 1 };
    expect(canonicalJson({ x: shared, y: shared })).toBe('{"x":{"a":1},"y":{"a":1}}');
  });

  it('keeps an own "__proto__" key, as JSON.parse makes it, in the canonical form and the fingerprint', () => {
    const parsed = JSON.parse('{"b":1,"__proto__":false}') as Json;
    expect(canonicalJson(parsed)).toBe('{"__proto__":false,"b":1}');
    expect(fingerprint('t', 1, parsed)).not.toBe(fingerprint('t', 1, { b: 1 }));
    expect(canonicalJson(reorder(parsed, 7))).toBe(canonicalJson(parsed));
  });

  it('does not normalise strings: different code units are different inputs', () => {
    expect(canonicalJson('\u00e9')).not.toBe(canonicalJson('e\u0301'));
    expect(fingerprint('t', 1, { name: 'Ann' })).not.toBe(fingerprint('t', 1, { name: 'ann' }));
  });
});

describe('fingerprint', () => {
  it('is hex sha256 and invariant under key order', () => {
    fc.assert(
      fc.property(jsonValue, fc.integer(), (value, seed) => {
        const fp = fingerprint('payment.charge', 1, value);
        expect(fp).toMatch(/^[0-9a-f]{64}$/);
        expect(fingerprint('payment.charge', 1, reorder(value, seed))).toBe(fp);
      }),
    );
  });

  it('differs when any one value differs', () => {
    fc.assert(
      fc.property(jsonObject, fc.nat(), jsonValue, (obj, pick, replacement) => {
        const keys = Object.keys(obj);
        const key = keys[pick % keys.length] as string;
        fc.pre(canonicalJson(obj[key] as Json) !== canonicalJson(replacement));
        const changed = { ...obj, [key]: replacement };
        expect(fingerprint('t', 1, changed)).not.toBe(fingerprint('t', 1, obj));
      }),
    );
  });

  it('includes the operation type and the schema version', () => {
    fc.assert(
      fc.property(jsonValue, fc.nat({ max: 1000 }), (value, version) => {
        const fp = fingerprint('a', version, value);
        expect(fingerprint('b', version, value)).not.toBe(fp);
        expect(fingerprint('a', version + 1, value)).not.toBe(fp);
      }),
    );
    expect(codeOf(() => fingerprint('a', 1.5, {}))).toBe('invalid_input');
  });
});

describe('assertMinorUnits', () => {
  it('accepts safe non-negative integers', () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: Number.MAX_SAFE_INTEGER }), (n) => {
        expect(codeOf(() => assertMinorUnits(n, 'amount'))).toBeUndefined();
      }),
    );
  });

  it('rejects floats, strings, negatives and unsafe integers', () => {
    fc.assert(
      fc.property(
        fc.oneof(
          fc.double().filter((n) => !Number.isInteger(n)),
          fc.string(),
          fc.integer({ max: -1 }),
          fc.constantFrom(2 ** 53, 1e21, Number.NaN, Infinity),
          fc.integer({ min: 0 }).map((n) => String(n)),
          fc.constantFrom(null, undefined, true, 10n, { amount: 1 }),
        ),
        (value) => {
          expect(codeOf(() => assertMinorUnits(value, 'amount'))).toBe('invalid_input');
        },
      ),
    );
  });
});

describe('validateKey and downstreamKey', () => {
  it('accepts 1..255 visible ASCII and rejects anything else', () => {
    fc.assert(
      fc.property(fc.stringMatching(/^[\x21-\x7E]{1,255}$/), (key) => {
        expect(codeOf(() => validateKey(key))).toBeUndefined();
      }),
    );
    fc.assert(
      fc.property(
        fc.string({ maxLength: 40 }),
        fc.string({ unit: 'binary', minLength: 1, maxLength: 3 }).filter((s) => /[^\x21-\x7E]/.test(s)),
        (prefix, bad) => {
          expect(codeOf(() => validateKey(prefix + bad))).toBe('invalid_key');
        },
      ),
    );
    expect(codeOf(() => validateKey(''))).toBe('invalid_key');
    expect(codeOf(() => validateKey('x'.repeat(256)))).toBe('invalid_key');
    expect(codeOf(() => validateKey('x'.repeat(255)))).toBeUndefined();
  });

  it('derives a stable, bounded, visible-ASCII downstream key per scope', () => {
    fc.assert(
      fc.property(
        fc.stringMatching(/^[\x21-\x7E]{1,60}$/),
        fc.stringMatching(/^[\x21-\x7E]{1,60}$/),
        fc.stringMatching(/^[\x21-\x7E]{1,255}$/),
        (tenantId, operationType, key) => {
          const scope = { tenantId, operationType, key };
          const dk = downstreamKey(scope);
          expect(dk).toMatch(/^of_[0-9a-f]{64}$/);
          expect(downstreamKey({ ...scope })).toBe(dk);
          expect(downstreamKey({ ...scope, tenantId: `${tenantId}x` })).not.toBe(dk);
        },
      ),
    );
    // No ambiguity from concatenation.
    expect(downstreamKey({ tenantId: 'a/b', operationType: 't', key: 'c' })).not.toBe(
      downstreamKey({ tenantId: 'a', operationType: 't', key: 'b/c' }),
    );
  });
});
