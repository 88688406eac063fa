/**
 * The image holds only what ships (Dockerfile): the product stage copies no
 * harness, tests, benchmarks or TypeScript sources, runs compiled JavaScript
 * as a non-root user on a current Node LTS, and is built in stages; the
 * sandbox, a dev tool compose uses as a stand-in provider, is a separate stage.
 * (test/deploy/compiled-entrypoints.test.ts starts the entry points.)
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

  it('builds from what ships and copies nothing else from the repository into the product', () => {
    const from = (stage: string) =>
      (s.get(stage) ?? [])
        .filter((l) => /^COPY\s/i.test(l) && !/--from=/.test(l))
        .flatMap((l) => l.split(/\s+/).slice(1, -1));
    // The build compiles the product folders (src/ holds the command lines too), never scripts/ or the harness.
    for (const src of from('build'))
      expect(src, src).toMatch(
        /^(package(-lock)?\.json|tsconfig(\.app)?\.json|packages\/onceflow(\/package\.json)?|src|workflows|activities)$/,
      );
    for (const src of from('product'))
      expect(src, src).toMatch(
        /^(package\.json|packages\/onceflow\/(package\.json|migrations)|migrations|console|bin)$/,
      );
  });

  it('runs compiled JavaScript, built in an earlier stage, on a current Node LTS', () => {
    const copies = product.filter((l) => /^COPY\s/i.test(l));
    // The sources stay in the build stage: the product gets its output.
    for (const l of copies) expect(l, l).not.toMatch(/\s(\.\/)?(src|workflows|activities|scripts)(\/|\s)/);
    expect(copies).toContain('COPY --from=build /app/dist/app ./dist/app');
    expect(copies).toContain('COPY --from=build /app/dist/workflow-bundle ./dist/workflow-bundle');
    expect(s.get('build')?.join('\n')).toMatch(/RUN npm run build:app/);
    const cmd = product.filter((l) => /^CMD\s/i.test(l)).at(-1)!;
    expect(JSON.parse(cmd.replace(/^CMD\s+/i, ''))).toEqual(['node', 'dist/app/src/worker/main.js']);
    expect(product.join('\n')).not.toMatch(/tsx/);
    // Every stage on one Node major, an LTS line (even) no older than 22.
    for (const [name, lines] of s) {
      const image = /^FROM\s+node:(\d+)-/i.exec(lines[0]!);
      if (image) expect(Number(image[1]) % 2 === 0 && Number(image[1]) >= 22, name).toBe(true);
    }
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
