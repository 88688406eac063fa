/**
 * inOneWrite: statements pipelined on one node-postgres client leave in one
 * socket write (and still each get their own answer), against real Postgres.
 */
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { inOneWrite } from '../src/db.ts';
import { testDatabaseUrl } from './support/env.ts';

let client: pg.Client;
type Socket = { _write: (...a: unknown[]) => unknown; _writev: (...a: unknown[]) => unknown };

beforeAll(async () => {
  client = new pg.Client({ connectionString: testDatabaseUrl() });
  await client.connect();
});
afterAll(async () => {
  await client?.end();
});

/** Counts the socket's low-level writes (one per system call) while `fn` runs. */
async function countWrites(fn: () => Promise<unknown>): Promise<number> {
  const socket = (client as unknown as { connection: { stream: Socket } }).connection.stream;
  const { _write, _writev } = socket;
  let writes = 0;
  socket._write = function (...a: unknown[]) {
    writes++;
    return _write.apply(this, a);
  };
  socket._writev = function (...a: unknown[]) {
    writes++;
    return _writev.apply(this, a);
  };
  try {
    await fn();
  } finally {
    socket._write = _write;
    socket._writev = _writev;
  }
  return writes;
}

/** Three statements in pipeline mode, optionally corked; returns their answers. */
async function threeStatements(corked: boolean): Promise<number[]> {
  const mode = client as unknown as { pipeline: boolean };
  mode.pipeline = true;
  try {
    const send = () =>
      [1, 2, 3].map((n) => client.query<{ n: number }>({ text: 'select $1::int as n', values: [n] }));
    const results = await Promise.all(corked ? inOneWrite(client, send) : send());
    return results.map((r) => r.rows[0]!.n);
  } finally {
    mode.pipeline = false;
  }
}

describe('inOneWrite', () => {
  it('sends pipelined statements in one write; each still gets its own answer', async () => {
    let answers: number[] = [];
    const separate = await countWrites(async () => {
      answers = await threeStatements(false);
    });
    expect(answers).toEqual([1, 2, 3]);
    expect(separate).toBeGreaterThan(1);
    const together = await countWrites(async () => {
      answers = await threeStatements(true);
    });
    expect(answers).toEqual([1, 2, 3]);
    expect(together).toBe(1);
  });

  it('returns what `send` returns and rethrows what it throws, leaving the socket uncorked', async () => {
    expect(inOneWrite(client, () => 42)).toBe(42);
    expect(() =>
      inOneWrite(client, () => {
        throw new Error('boom');
      }),
    ).toThrow('boom');
    const socket = (client as unknown as { connection: { stream: { writableCorked: number } } }).connection
      .stream;
    expect(socket.writableCorked).toBe(0);
    expect((await client.query<{ n: number }>('select 1 as n')).rows[0]!.n).toBe(1);
  });

  it('runs `send` as it is for anything without a socket', () => {
    expect(inOneWrite({ query: () => Promise.reject(new Error('unused')) } as never, () => 'sent')).toBe(
      'sent',
    );
  });
});
