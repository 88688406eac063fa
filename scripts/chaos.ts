// `npm run chaos -- [options]`: the fault matrix a developer runs before a release.
// See docs/OPERATIONS.md, "Chaos and fault matrix", and `npm run chaos -- --help`.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { loadConfig } from '../src/config.ts';
import { parseChaosArgs, USAGE, UsageError, type ChaosOptions } from '../dev/chaos/options.ts';
import { applyChaosProviders, stopChaosProviders } from '../dev/chaos/providers.ts';
import { ChaosStack } from '../dev/chaos/stack.ts';
import { runScenario, type ScenarioResult } from '../dev/chaos/run.ts';
import { formatTable } from '../dev/chaos/report.ts';

let options: ChaosOptions;
try {
  options = parseChaosArgs(process.argv.slice(2));
} catch (err) {
  if (!(err instanceof UsageError)) throw err;
  process.stderr.write(`chaos: ${err.message}\n\n${USAGE}`);
  process.exit(2);
}
if (options.help) {
  process.stdout.write(USAGE);
  process.exit(0);
}

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const config = loadConfig(process.env, root);
const runId = `${Date.now().toString(36)}${randomBytes(2).toString('hex')}`;
const runDir = fs.mkdtempSync(path.join(os.tmpdir(), `onceflow-chaos-${runId}-`));
const started = Date.now();
const log = (line: string) => {
  const t = `${Math.round((Date.now() - started) / 1000)}s`.padStart(5);
  process.stderr.write(`[chaos ${t}] ${line}\n`);
};

const stack = new ChaosStack({
  root,
  runDir,
  runId,
  sharedDatabaseUrl: config.databaseUrl,
  toolsDir: config.toolsDir,
  sharedPostgres: options.sharedPostgres,
  seed: options.seed,
  log,
});
const abort = new AbortController();
let cleaning: Promise<void> | undefined;

/** Stops every process the run started and drops its database/cluster; keeps the logs only when asked or on failure. */
function cleanup(keepLogs: boolean): Promise<void> {
  cleaning ??= (async () => {
    abort.abort();
    await stack.stop(options.keep);
    await stopChaosProviders();
    // The bulky state (Postgres data, Temporal's SQLite) always goes; logs stay for a failed run.
    if (options.keep || keepLogs) {
      for (const f of [
        'temporal.sqlite',
        'temporal.sqlite-wal',
        'temporal.sqlite-shm',
        'workflow-bundle.js',
      ]) {
        if (!options.keep) fs.rmSync(path.join(runDir, f), { force: true });
      }
      log(`logs kept in ${runDir}`);
    } else {
      fs.rmSync(runDir, { recursive: true, force: true });
    }
  })();
  return cleaning;
}

let interrupted = 0;
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.on(signal, () => {
    interrupted++;
    if (interrupted > 1) {
      stack.killNow();
      process.exit(130);
    }
    log(`${signal}: stopping everything the run started (again to kill at once)...`);
    void cleanup(true).finally(() => process.exit(130));
  });
}

const results: ScenarioResult[] = [];
let exitCode = 0;
try {
  log(`run folder ${runDir}`);
  await applyChaosProviders(options.providers); // --providers: before the processes start
  await stack.start();
  for (const name of options.scenarios) {
    if (abort.signal.aborted) break;
    results.push(await runScenario(stack, name, options, runId, abort.signal, log));
  }
  exitCode = results.some((r) => r.status === 'FAIL') ? 1 : 0;
} catch (err) {
  log(`the run could not continue: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`);
  exitCode = 1;
}

if (!abort.signal.aborted) {
  if (options.json) {
    process.stdout.write(JSON.stringify({ options, runDir, exitCode, results }, null, 2) + '\n');
  } else {
    process.stdout.write('\n' + formatTable(results, options.settleSeconds) + '\n\n');
    process.stdout.write(
      exitCode === 0
        ? `chaos: all ${results.length} scenarios passed (${Math.round((Date.now() - started) / 1000)} s)\n`
        : `chaos: FAILED (${Math.round((Date.now() - started) / 1000)} s); process logs in ${runDir}\n`,
    );
  }
  await cleanup(exitCode !== 0);
  process.exit(exitCode);
}
