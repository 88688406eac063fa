/**
 * The image holds only what ships (Dockerfile): the product stage copies no
 * harness, tests or benchmarks and runs as a non-root user; the sandbox, a
 * dev tool compose uses as a stand-in provider, is a separate stage.
 */
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';

const root = path.resolve(import.meta.dirname, '../..');
const dockerfile = fs.readFileSync(path.join(root, 'Dockerfile'), 'utf8');

/** Stage name -> its instructions, in order (comments and continuation-free lines only). */
function stages(text: string): Map<string, string[]> {
  const out = new Map<string, string[]>();
  let current: string[] = [];
  let n = 0;
  for (const line of text.split('\n').map((l) => l.trim())) {
    if (!line || line.startsWith('#')) continue;
    const from = /^FROM\s+\S+(?:\s+AS\s+(\S+))?/i.exec(line);
    if (from) {
      current = [line];
      out.set(from[1] ?? `#${n}`, current);
      n++;
    } else current.push(line);
  }
  return out;
}

describe('Dockerfile', () => {
  const s = stages(dockerfile);
  const product = s.get('product') ?? [];

  it('copies into the product image only what ships', () => {
    const sources = product
      .filter((l) => /^COPY\s/i.test(l))
      .flatMap((l) => l.split(/\s+/).slice(1, -1))
      .filter((a) => !a.startsWith('--'));
    expect(sources.length).toBeGreaterThan(0);
    for (const src of sources) expect(src, src).not.toMatch(/^(\.\/)?(dev|test|bench)(\/|$)|^\.$/);
  });

  it('runs as a non-root user', () => {
    expect(product.filter((l) => /^USER\s/i.test(l)).at(-1)).toMatch(/^USER\s+node$/i);
  });

  it('builds the product image by default and the sandbox only as its own stage', () => {
    const last = [...s.values()].at(-1)!;
    expect(last[0]).toMatch(/^FROM\s+product$/i);
    expect(s.get('sandbox')?.join('\n')).toMatch(/COPY dev\/sandbox \.\/dev\/sandbox/);
  });
});
