/**
 * `npm run deps:graph`: the shipped code's module graph, one node per folder
 * of src/ (plus workflows/ and activities/), as a Mermaid flowchart for
 * docs/ARCHITECTURE.md. It reads dependency-cruiser's resolved graph (the one
 * `npm run lint` checks), so no Graphviz is needed. `--check` fails when the
 * committed graph in docs/ARCHITECTURE.md is not the current one.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';

const DOC = 'docs/ARCHITECTURE.md';
const BEGIN = '<!-- deps:graph begin (npm run deps:graph) -->';
const END = '<!-- deps:graph end -->';

interface Cruise {
  modules: { source: string; dependencies: { resolved: string; dependencyTypes: string[] }[] }[];
}

const node = (file: string): string | null => {
  // The core package is one box: the app reaches it only through its entries.
  if (file.startsWith('packages/onceflow/src/')) return 'onceflow';
  const m = /^(workflows|activities)\/|^src\/([^/]+)\//.exec(file);
  if (m) return m[1] ?? `src/${m[2]}`;
  return /^src\/[^/]+\.ts$/.test(file) ? file.replace(/\.ts$/, '') : null;
};
const id = (name: string) => name.replace(/[^A-Za-z0-9]/g, '_');

const json = execFileSync(
  'npx',
  [
    'depcruise',
    'src',
    'workflows',
    'activities',
    'packages/onceflow/src',
    '--config',
    '.dependency-cruiser.cjs',
    '--output-type',
    'json',
  ],
  { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 },
);
const cruise = JSON.parse(json) as Cruise;
const edges = new Map<string, boolean>(); // "from to" -> every import is type-only
for (const m of cruise.modules) {
  const from = node(m.source);
  if (!from) continue;
  for (const d of m.dependencies) {
    const to = node(d.resolved);
    if (!to || to === from) continue;
    const key = `${from} ${to}`;
    const typeOnly = d.dependencyTypes.includes('type-only');
    edges.set(key, (edges.get(key) ?? true) && typeOnly);
  }
}
const lines = ['```mermaid', 'flowchart LR'];
for (const [key, typeOnly] of [...edges].sort(([a], [b]) => a.localeCompare(b))) {
  const [from, to] = key.split(' ') as [string, string];
  lines.push(`  ${id(from)}[${from}] ${typeOnly ? '-.->' : '-->'} ${id(to)}[${to}]`);
}
lines.push('```');
const graph = `${BEGIN}\n\n${lines.join('\n')}\n\n${END}`;

const doc = readFileSync(DOC, 'utf8');
const start = doc.indexOf(BEGIN);
const end = doc.indexOf(END);
if (start < 0 || end < 0) throw new Error(`${DOC} has no ${BEGIN} ... ${END} block`);
const next = doc.slice(0, start) + graph + doc.slice(end + END.length);
if (process.argv.includes('--check')) {
  if (next !== doc) {
    console.error(`${DOC}: the module graph is stale; run \`npm run deps:graph\` and commit it.`);
    process.exit(1);
  }
} else {
  writeFileSync(DOC, next);
}
