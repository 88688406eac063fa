/**
 * The one shape of a composition root:
 *
 *   await runProcess('api', async ({ resources, stopping, started }) => {
 *     const pool = resources.add('postgres pool', createPool(...), (p) => p.end());
 *     ...                      // every dependency registered as soon as it exists
 *     started();               // start-up done: failures from here on are not start-up failures
 *     await untilAborted(stopping);
 *   });
 *
 * Whatever way `main` ends (returns, throws during start-up, throws later),
 * the resources close in reverse order, then the process exits: 0 (or the
 * code `main` returned), 1 after a failure or a failed close. The first
 * SIGTERM/SIGINT aborts `stopping`; `main` decides what stopping means
 * (an HTTP server just returns, the worker drains).
 */
import { errorFields, log } from '../log.ts';
import { Resources } from './resources.ts';

export interface ProcessContext {
  resources: Resources;
  /** Aborted by the first SIGTERM or SIGINT; its `reason` is the signal name. */
  stopping: AbortSignal;
  /** Marks the end of start-up (only changes how a later failure is logged). */
  started(): void;
}

export interface RunOptions {
  /**
   * Install the SIGTERM/SIGINT handlers (default true). A short-lived CLI
   * passes false: a signal then ends it the default way, as before.
   */
  handleSignals?: boolean;
  /** Reports a failure of `main` and returns the exit code; default: an error log line, 1. */
  onError?: (err: unknown, phase: 'start' | 'run') => number;
}

/** Resolves when `signal` is aborted. */
export function untilAborted(signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.resolve();
  return new Promise((resolve) => signal.addEventListener('abort', () => resolve(), { once: true }));
}

export async function runProcess(
  name: string,
  main: (ctx: ProcessContext) => Promise<number | void>,
  opts: RunOptions = {},
): Promise<never> {
  const resources = new Resources();
  const controller = new AbortController();
  let phase: 'start' | 'run' = 'start';
  const onSignal = (signal: NodeJS.Signals) => {
    if (controller.signal.aborted) return;
    log.info(`${name} stopping`, { signal });
    controller.abort(signal);
  };
  if (opts.handleSignals !== false) {
    process.on('SIGTERM', onSignal);
    process.on('SIGINT', onSignal);
  }
  let code: number;
  try {
    code =
      (await main({
        resources,
        stopping: controller.signal,
        started: () => {
          phase = 'run';
        },
      })) ?? 0;
  } catch (err) {
    code = opts.onError
      ? opts.onError(err, phase)
      : (log.error(phase === 'start' ? `${name} failed to start` : `${name} failed`, errorFields(err)), 1);
  }
  if (!(await resources.closeAll()) && code === 0) code = 1;
  if (opts.handleSignals !== false) log.info(`${name} stopped`, { exitCode: code });
  process.exit(code);
}
