/**
 * One behaviour for every script's command line (commander 14; 15 needs Node 22):
 *
 * - `--help` / `-h` prints usage on stdout and exits 0;
 * - an unknown flag, a missing or extra argument, or a bad value prints the
 *   problem and the usage on stderr and exits 2;
 * - with `--json` (for scripts that declare it) every line a script writes,
 *   errors and usage included, is one JSON object;
 * - an error thrown by the script's body exits 1 (as text, or as JSON).
 */
import { Command, CommanderError, InvalidArgumentError } from 'commander';

const EXIT_USAGE = 2;

export interface CliOutput {
  json: boolean;
  /** A result: JSON on stdout under --json, otherwise the text on stdout. */
  result(value: unknown, text: string): void;
  /** Progress and notes: JSON on stderr under --json, otherwise the text on stderr. */
  info(text: string, fields?: Record<string, unknown>): void;
}

export function createCommand(name: string, description: string, opts: { json?: boolean } = {}): Command {
  const program = new Command(name).description(description).helpOption('-h, --help', 'show this help');
  if (opts.json) program.option('--json', 'write every output, errors included, as JSON lines');
  return program;
}

/** For `.option(..., positiveInt)`: rejects anything but a whole number > 0 (a usage error, exit 2). */
export function positiveInt(raw: string): number {
  if (!/^\d+$/.test(raw) || Number(raw) <= 0 || !Number.isSafeInteger(Number(raw))) {
    throw new InvalidArgumentError('must be a positive integer');
  }
  return Number(raw);
}

/** The program and all its subcommands, depth first. */
function allCommands(program: Command): Command[] {
  return [program, ...program.commands.flatMap((c) => allCommands(c))];
}

function wantsJson(program: Command, argv: string[]): boolean {
  // Decided from the raw argv too, so a usage error is JSON when --json was asked for.
  return (
    allCommands(program).some((c) => c.options.some((o) => o.long === '--json')) && argv.includes('--json')
  );
}

function output(json: boolean): CliOutput {
  return {
    json,
    result(value, text) {
      process.stdout.write(json ? `${JSON.stringify(value)}\n` : `${text}\n`);
    },
    info(text, fields = {}) {
      process.stderr.write(json ? `${JSON.stringify({ message: text, ...fields })}\n` : `${text}\n`);
    },
  };
}

export function errorJson(code: string, message: string, extra: Record<string, unknown> = {}): string {
  return `${JSON.stringify({ error: { code, message, ...extra } })}\n`;
}

/**
 * Parses argv (process.argv by default); on a usage error prints it with the
 * usage and exits 2, on --help exits 0. Returns the output to write through.
 */
export function parseCli(program: Command, argv: string[] = process.argv): CliOutput {
  const json = wantsJson(program, argv.slice(2));
  // Help arrives in pieces (text, then any addHelpText); under --json it is sent as one object.
  let helpText = '';
  // The command whose parsing failed (a subcommand's own usage is the useful one).
  let failing = program;
  for (const cmd of allCommands(program)) {
    cmd.exitOverride((err) => {
      failing = cmd;
      throw err;
    });
    cmd.configureOutput({
      writeOut: (s) => (json ? (helpText += s) : process.stdout.write(s)),
      // Errors are written below, once, with the usage.
      writeErr: () => undefined,
      outputError: () => undefined,
    });
  }
  try {
    program.parse(argv);
  } catch (err) {
    if (!(err instanceof CommanderError)) throw err;
    if (err.code === 'commander.helpDisplayed' || err.code === 'commander.version') {
      if (json) process.stdout.write(`${JSON.stringify({ usage: helpText.trim() })}\n`);
      process.exit(0);
    }
    // 'commander.help' with an error: a program of subcommands was run without one.
    const message =
      err.code === 'commander.help' ? 'a command is required' : err.message.replace(/^error: /, '');
    const usage = failing.helpInformation().trimEnd();
    process.stderr.write(
      json ? errorJson('usage', message, { usage }) : `${failing.name()}: ${message}\n\n${usage}\n`,
    );
    process.exit(EXIT_USAGE);
  }
  if (json && npmBannerOnStdout()) {
    process.stderr.write(
      `${JSON.stringify({
        warning:
          'npm printed its "> onceflow@… script" banner on stdout before this JSON; ' +
          'run `npm run -s …` (or `npx onceflow …`) to keep stdout pure JSON',
      })}\n`,
    );
  }
  return output(json);
}

/**
 * Whether `npm run` (without -s) wrote its banner to our stdout: npm prints it
 * there before starting the script unless its loglevel is silent, which it
 * passes on as npm_config_loglevel. Nothing can take it back, so the CLI says
 * how to avoid it. (A repo .npmrc with loglevel=silent would hide it, but also
 * every npm error and `npm ls`/`npm pack` output in this repo.)
 */
function npmBannerOnStdout(env = process.env): boolean {
  return (
    env.npm_command === 'run' && env.npm_lifecycle_event !== undefined && env.npm_config_loglevel !== 'silent'
  );
}

/** Runs a script's body: a thrown error is printed (as JSON under --json) and exits 1. */
async function runMain(out: CliOutput, main: () => Promise<void>): Promise<void> {
  try {
    await main();
  } catch (err) {
    const message = err instanceof Error ? err.message : String(err);
    const code = (err as { code?: unknown }).code;
    process.stderr.write(
      out.json ? errorJson(typeof code === 'string' ? code : 'failed', message) : `${message}\n`,
    );
    process.exitCode = 1;
  }
}

/** parseCli, then runMain. */
export async function runCli(
  program: Command,
  main: (program: Command, out: CliOutput) => Promise<void>,
  argv: string[] = process.argv,
): Promise<void> {
  const out = parseCli(program, argv);
  await runMain(out, () => main(program, out));
}
