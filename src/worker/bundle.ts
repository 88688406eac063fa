/**
 * The pre-built workflow bundle: bundling at every start makes a crashed worker slow to come back,
 * so the bundle is a file named after a hash of its inputs, reused while the hash matches (a stale
 * bundle never runs). `npm run build` and the Dockerfile build it ahead of time.
 */
import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { bundleWorkflowCode } from '@temporalio/worker';
import { CODE_EXT, CODE_ROOT, PACKAGE_ROOT } from '../paths.ts';

// From the sources, the workflow .ts files; from the compiled build (the image), its .js files.
const WORKFLOWS_PATH = path.join(CODE_ROOT, `workflows/index${CODE_EXT}`);
/** The same workflows plus the smoke probe, for workers started with `smoke` (never production). */
const SMOKE_WORKFLOWS_PATH = path.join(CODE_ROOT, `workflows/with-smoke${CODE_EXT}`);
/**
 * Tracing interceptors: a pre-built bundle ignores WorkerOptions.interceptors.workflowModules, so they are
 * bundled.
 */
const WORKFLOW_INTERCEPTOR_MODULES = [path.join(CODE_ROOT, `workflows/interceptors${CODE_EXT}`)];
/** `onceflow/workflow`, aliased for webpack (which ignores tsconfig's paths) and covered by the hash. */
const CORE_WORKFLOW_MODULE = 'onceflow/workflow';
const CORE_WORKFLOW_PATH = path.join(
  PACKAGE_ROOT,
  'packages/onceflow',
  CODE_EXT === '.ts' ? 'src/workflow.ts' : 'dist/workflow.js',
);
/** Git-ignored; the Dockerfile builds into the same place inside the image. */
const DEFAULT_BUNDLE_DIR = path.join(PACKAGE_ROOT, 'dist/workflow-bundle');
/** Bump when the way bundles are built changes, so older files are not reused. */
const BUNDLE_FORMAT = 2;

/**
 * The entry, every module it reaches by relative import, and its folder. Type-only imports are
 * erased by the bundler, so editing an activity does not force a rebuild.
 */
function workflowSourceFiles(entry: string): string[] {
  const seen = new Set<string>();
  const queue = [path.resolve(entry)];
  const dir = path.dirname(path.resolve(entry));
  for (const name of fs.readdirSync(dir)) {
    const file = path.join(dir, name);
    if (/\.[cm]?[jt]s$/.test(name) && fs.statSync(file).isFile()) queue.push(file);
  }
  const specifier =
    /(?:^|[\n;])\s*(import|export)\s+(type\s+)?(?:[^'";]*?\sfrom\s+)?['"]([^'"]+)['"]|import\(\s*['"]([^'"]+)['"]\s*\)/g;
  while (queue.length) {
    const file = queue.pop() as string;
    if (seen.has(file)) continue;
    seen.add(file);
    const text = fs.readFileSync(file, 'utf8');
    for (const m of text.matchAll(specifier)) {
      if (m[2]) continue; // `import type ... from` / `export type ... from`
      const spec = m[3] ?? m[4];
      if (spec === CORE_WORKFLOW_MODULE) queue.push(CORE_WORKFLOW_PATH);
      if (!spec?.startsWith('.')) continue;
      const target = path.resolve(path.dirname(file), spec);
      if (fs.existsSync(target) && fs.statSync(target).isFile()) queue.push(target);
    }
  }
  return [...seen].sort();
}

function packageVersion(name: string): string {
  const require = createRequire(import.meta.url);
  try {
    return (require(`${name}/package.json`) as { version: string }).version;
  } catch {
    return 'unknown';
  }
}

/**
 * Tracing interceptors only when `traced`: even with tracing off they cost every workflow task span
 * bookkeeping and extra promises. Both variants emit the same commands, so histories replay on either.
 */
function defaultInterceptorModules(entry: string, traced: boolean): string[] {
  const ours = [WORKFLOWS_PATH, SMOKE_WORKFLOWS_PATH].includes(path.resolve(entry));
  return traced && ours ? WORKFLOW_INTERCEPTOR_MODULES : [];
}

/** Hash of the bundle's inputs: source paths and contents, SDK versions, bundle format. */
function workflowBundleHash(
  entry: string = WORKFLOWS_PATH,
  interceptorModules: string[] = defaultInterceptorModules(entry, false),
): string {
  const hash = createHash('sha256');
  hash.update(`format ${BUNDLE_FORMAT}\n`);
  for (const pkg of [
    '@temporalio/workflow',
    '@temporalio/worker',
    '@temporalio/common',
    '@temporalio/interceptors-opentelemetry',
    '@opentelemetry/api',
    '@opentelemetry/sdk-trace-base',
  ])
    hash.update(`${pkg}@${packageVersion(pkg)}\n`);
  const base = path.dirname(path.resolve(entry));
  const files = new Set([entry, ...interceptorModules].flatMap((f) => workflowSourceFiles(f)));
  for (const m of interceptorModules) hash.update(`interceptors ${path.relative(base, path.resolve(m))}\n`);
  for (const file of [...files].sort()) {
    hash.update(`${path.relative(base, file)}\n`);
    hash.update(fs.readFileSync(file));
    hash.update('\n');
  }
  return hash.digest('hex').slice(0, 16);
}

/**
 * The default build ID: package version + hash of the production workflow code, so a workflow change
 * is a new Deployment Version by itself and never runs Pinned orders of the code before it.
 */
export function defaultBuildId(): string {
  const { version } = JSON.parse(fs.readFileSync(path.join(PACKAGE_ROOT, 'package.json'), 'utf8')) as {
    version: string;
  };
  return `${version}-${workflowBundleHash(WORKFLOWS_PATH, [])}`;
}

export interface EnsuredBundle {
  path: string;
  hash: string;
  /** False when a matching bundle already existed. */
  built: boolean;
}

const quietLogger = {
  log: () => undefined,
  trace: () => undefined,
  debug: () => undefined,
  info: () => undefined,
  warn: (message: string) => console.warn(message),
  error: (message: string) => console.error(message),
};

/**
 * Returns a bundle matching the sources, building it if needed; a temp file renamed into place, so no
 * reader sees half a bundle.
 */
export async function ensureWorkflowBundle(
  opts: {
    workflowsPath?: string;
    /** The entry with the smoke probe (workflows/with-smoke.ts); ignored with workflowsPath. */
    smoke?: boolean;
    /** The variant with the tracing interceptors; default false. */
    traced?: boolean;
    /** Explicit interceptor modules; default from `traced`. */
    interceptorModules?: string[];
    dir?: string;
    log?: (line: string) => void;
  } = {},
): Promise<EnsuredBundle> {
  const entry = opts.workflowsPath ?? (opts.smoke ? SMOKE_WORKFLOWS_PATH : WORKFLOWS_PATH);
  const dir = opts.dir ?? DEFAULT_BUNDLE_DIR;
  const interceptorModules =
    opts.interceptorModules ?? defaultInterceptorModules(entry, opts.traced ?? false);
  const hash = workflowBundleHash(entry, interceptorModules);
  // Variants and source/compiled builds are named apart, so pruning one never removes another's.
  const compiled = !opts.workflowsPath && CODE_EXT === '.js' ? 'compiled-' : '';
  const variant = `workflows-${compiled}${opts.smoke && !opts.workflowsPath ? 'smoke-' : ''}${interceptorModules.length ? 'traced-' : ''}`;
  const file = path.join(dir, `${variant}${hash}.js`);
  if (fs.existsSync(file)) return { path: file, hash, built: false };

  opts.log?.(`workflow code changed or never bundled; building ${path.relative(PACKAGE_ROOT, file)}`);
  const { code } = await bundleWorkflowCode({
    workflowsPath: entry,
    workflowInterceptorModules: interceptorModules,
    logger: quietLogger,
    webpackConfigHook: (config) => ({
      ...config,
      resolve: {
        ...config.resolve,
        alias: { ...config.resolve?.alias, [`${CORE_WORKFLOW_MODULE}$`]: CORE_WORKFLOW_PATH },
      },
    }),
  });
  fs.mkdirSync(dir, { recursive: true });
  const tmp = `${file}.${process.pid}.${randomBytes(3).toString('hex')}.tmp`;
  fs.writeFileSync(tmp, code);
  fs.renameSync(tmp, file);
  // Older bundles of this variant are dead weight; a concurrent builder's temp file is left alone.
  const sameVariant = new RegExp(`^${variant}[0-9a-f]+\\.js$`);
  for (const name of fs.readdirSync(dir)) {
    if (sameVariant.test(name) && path.join(dir, name) !== file)
      fs.rmSync(path.join(dir, name), { force: true });
  }
  return { path: file, hash, built: true };
}
