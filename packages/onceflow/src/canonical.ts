/**
 * Identity of an operation: key validation, canonical JSON, fingerprints and
 * downstream keys. Pure functions, no I/O.
 *
 * Strings are NOT normalised (no Unicode NFC, no case folding, no trimming):
 * they are compared code unit for code unit. Normalisation is a business
 * decision (is "Ä" the same customer name as "A\u0308"?), so it belongs to the
 * caller's validation schema, which runs before the ledger sees the input.
 */
import { createHash } from 'node:crypto';
import { LedgerError } from './errors.ts';
import type { Json, Scope } from './types.ts';

const VISIBLE_ASCII_1_255 = /^[\x21-\x7E]{1,255}$/;

/** An operation key: 1..255 characters of visible ASCII (0x21-0x7E), as in the Idempotency-Key draft. */
export function validateKey(key: string): void {
  if (typeof key !== 'string' || !VISIBLE_ASCII_1_255.test(key)) {
    throw new LedgerError(
      'invalid_key',
      'operation key must be 1 to 255 visible ASCII characters (0x21-0x7E)',
    );
  }
}

/** Tenant and operation type follow the same alphabet as keys; they are ours, so a bad one is invalid input. */
export function validateScope(scope: Scope): void {
  if (typeof scope !== 'object' || scope === null)
    throw new LedgerError('invalid_input', 'scope is required');
  for (const field of ['tenantId', 'operationType'] as const) {
    const value = scope[field];
    if (typeof value !== 'string' || !VISIBLE_ASCII_1_255.test(value)) {
      throw new LedgerError('invalid_input', `scope.${field} must be 1 to 255 visible ASCII characters`);
    }
  }
  validateKey(scope.key);
}

/** Money is an integer number of minor units: a safe, non-negative integer. Floats and strings are rejected. */
export function assertMinorUnits(value: unknown, field: string): asserts value is number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0) {
    throw new LedgerError('invalid_input', `${field} must be a non-negative integer number of minor units`);
  }
}

function invalid(path: string, what: string): LedgerError {
  return new LedgerError('invalid_input', `cannot canonicalise ${path}: ${what}`);
}

function isPlainObject(value: object): boolean {
  const proto: unknown = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
}

function write(value: unknown, path: string, stack: Set<object>): string {
  switch (typeof value) {
    case 'string':
      return JSON.stringify(value);
    case 'boolean':
      return value ? 'true' : 'false';
    case 'number':
      if (!Number.isFinite(value)) throw invalid(path, 'non-finite number');
      return JSON.stringify(value); // -0 becomes 0; JSON.stringify's shortest round-trip form otherwise
    case 'object': {
      if (value === null) return 'null';
      if (stack.has(value)) throw invalid(path, 'circular reference');
      if (value instanceof Date) throw invalid(path, 'Date (convert it to an ISO string first)');
      stack.add(value);
      try {
        if (Array.isArray(value)) {
          const parts: string[] = [];
          for (let i = 0; i < value.length; i++) {
            const item: unknown = value[i];
            if (item === undefined) throw invalid(`${path}[${i}]`, 'undefined in an array');
            parts.push(write(item, `${path}[${i}]`, stack));
          }
          return `[${parts.join(',')}]`;
        }
        if (!isPlainObject(value))
          throw invalid(path, 'not a plain object (Map, Set, class instance, Buffer)');
        const record = value as Record<string, unknown>;
        // Default sort compares UTF-16 code units: deterministic and locale-independent.
        const keys = Object.keys(record).sort();
        const parts: string[] = [];
        for (const key of keys) {
          const item = record[key];
          if (item === undefined) continue; // an absent optional field and `undefined` mean the same
          parts.push(`${JSON.stringify(key)}:${write(item, `${path}.${key}`, stack)}`);
        }
        return `{${parts.join(',')}}`;
      } finally {
        stack.delete(value);
      }
    }
    case 'undefined':
      throw invalid(path, 'undefined');
    default:
      throw invalid(path, typeof value); // bigint, function, symbol
  }
}

/**
 * Canonical JSON: sorted keys, no whitespace. Rejects anything ambiguous (non-finite numbers,
 * Dates, BigInt, cycles, non-plain objects…), so inputs that look equal fingerprint equal.
 */
export function canonicalJson(value: unknown): string {
  return write(value, '$', new Set());
}

function sha256Hex(text: string): string {
  return createHash('sha256').update(text, 'utf8').digest('hex');
}

/** Hex SHA-256 over canonical JSON of (operation type, schema version, input). */
export function fingerprint(operationType: string, schemaVersion: number, input: unknown): string {
  if (!Number.isSafeInteger(schemaVersion) || schemaVersion < 0) {
    throw new LedgerError('invalid_input', 'schemaVersion must be a non-negative integer');
  }
  return sha256Hex(canonicalJson({ input, operationType, schemaVersion }));
}

/**
 * The provider idempotency key: `of_` + SHA-256 of the scope, the same for every attempt, so a
 * retry never creates a second effect; hashed so providers never see tenant ids.
 */
export function downstreamKey(scope: Scope): string {
  return `of_${sha256Hex(canonicalJson([scope.tenantId, scope.operationType, scope.key]))}`;
}

/**
 * Serialises a result for storage and returns what a replay will see.
 * JSON round trip: Dates become ISO strings (via toJSON), `undefined` object
 * properties and functions are dropped, `undefined` in arrays becomes null.
 * Non-finite numbers and BigInt are rejected, not silently turned into null.
 */
export function toStoredJson(value: unknown, what: string): { text: string; value: Json } {
  let text: string | undefined;
  try {
    text = JSON.stringify(value, (_key, v: unknown) => {
      if (typeof v === 'number' && !Number.isFinite(v)) throw invalid(what, 'non-finite number');
      return v;
    });
  } catch (err) {
    if (err instanceof LedgerError) throw err;
    throw new LedgerError('invalid_input', `cannot store ${what} as JSON`, { cause: err });
  }
  if (text === undefined) throw invalid(what, 'not representable as JSON');
  return { text, value: JSON.parse(text) as Json };
}
