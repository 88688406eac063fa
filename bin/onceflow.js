#!/usr/bin/env node
/**
 * `onceflow` (npx onceflow …, or the `bin` of an install): one entry for the
 * command-line tools, so they compose like any other tool.
 *
 *   onceflow ops <command> …       the operator's recovery path (src/cli/ops.ts)
 *   onceflow api-key create|list|revoke …   tenant API keys (src/cli/api-key.ts)
 *   onceflow demo …                a few orders through the running stack (scripts/demo.ts)
 *   onceflow --version             the package version
 *
 * Each subcommand runs as a child process with stdout and stderr passed
 * through untouched: this file writes nothing of its own to stdout except
 * --version and --help, so `--json` output stays pure JSON. In a checkout the
 * scripts are TypeScript run through tsx (a runtime dependency); in the image,
 * which holds only the build, their compiled JavaScript (dist/app/src/cli/).
 * Both are resolved from this file so the command works from any directory.
 */
import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import process from 'node:process';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const SUBCOMMANDS = {
  ops: 'src/cli/ops.ts',
  'api-key': 'src/cli/api-key.ts',
  demo: 'scripts/demo.ts',
};

const USAGE = `Usage: onceflow <command> [options]

Commands:
  ops <command>              the operator's recovery path (onceflow ops --help)
  api-key create|list|revoke tenant API keys (onceflow api-key --help)
  demo                       a few orders through the running stack (onceflow demo --help)

Options:
  -V, --version              print the version
  -h, --help                 show this help

Exit status: 0 done; 1 refused or failed; 2 bad usage. --json puts only JSON on stdout.
`;

const [first, ...rest] = process.argv.slice(2);
if (first === '--version' || first === '-V') {
  const pkg = JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8'));
  process.stdout.write(`${pkg.version}\n`);
  process.exit(0);
}
if (first === '--help' || first === '-h') {
  process.stdout.write(USAGE);
  process.exit(0);
}
const script = first === undefined ? undefined : SUBCOMMANDS[first];
if (!script) {
  // Usage errors on stderr and exit 2, like every script's command line (src/cli/command.ts).
  const problem = first === undefined ? 'a command is required' : `unknown command '${first}'`;
  process.stderr.write(
    process.argv.includes('--json')
      ? `${JSON.stringify({ error: { code: 'usage', message: problem, usage: USAGE.trim() } })}\n`
      : `onceflow: ${problem}\n\n${USAGE}`,
  );
  process.exit(2);
}

const source = path.join(root, script);
const compiled = path.join(root, 'dist/app', script.replace(/\.ts$/, '.js'));
if (!existsSync(source) && !existsSync(compiled)) {
  // The library package (npm pack) carries this file as its `bin` but none of the application's
  // scripts: say where the command lives instead of failing on a missing module.
  process.stderr.write(
    `onceflow ${first}: not in this install (${root}). The command-line tools ship with the ` +
      'onceflow application (a checkout or the Docker image), not with the library package.\n',
  );
  process.exit(1);
}

const entry = existsSync(source) ? ['--import', import.meta.resolve('tsx'), source] : [compiled];
const child = spawn(process.execPath, [...entry, ...rest], { stdio: 'inherit' });
// Forward the signals a terminal or supervisor sends, so Ctrl-C stops the script, not just this wrapper.
for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP']) process.on(signal, () => child.kill(signal));
child.on('exit', (code, signal) => {
  if (signal) {
    // Die of the same signal, as a shell expects; without our handler, so it is not forwarded again.
    process.removeAllListeners(signal);
    process.kill(process.pid, signal);
  } else process.exit(code ?? 1);
});
