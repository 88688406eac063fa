/**
 * The one process supervisor: `npm start` (dev/start.ts), the API's cluster
 * mode (src/api/cluster.ts), the chaos harness (dev/chaos/) and the end-to-end
 * benchmark (bench/e2e.ts) all run their children through it, so restarts,
 * backoff and stopping behave the same everywhere.
 *
 * One `Supervisor` owns one logical service: it starts a child, waits until it
 * is ready (an optional hook), restarts it after an exit nobody asked for
 * (capped exponential backoff with jitter, optionally giving up), and stops it
 * gracefully (SIGTERM, SIGKILL after a grace period). Children it spawns get a
 * process group of their own, so a stop or a kill -9 reaches whatever the
 * child started too, and the terminal's Ctrl-C reaches only the parent, which
 * then stops its children in the order it chooses. They are also on a leash
 * (src/process/leash.ts): if the parent dies without stopping them (kill -9,
 * an OOM kill), each child's group gets SIGTERM, then SIGKILL, within seconds.
 *
 * An exit is "expected" when this supervisor caused it (stop, kill9,
 * signalAndWait); every other exit is unexpected, and only those restart.
 */
import type { ChildProcess } from 'node:child_process';
import { EventEmitter } from 'node:events';
import fs from 'node:fs';
import readline from 'node:readline';
import { backoffMs, type Backoff } from 'onceflow/postgres';
import { spawnLeashed } from './leash.ts';

/**
 * The delay before the n-th consecutive restart is the shared backoffMs; its jitter keeps
 * children that crashed together (a lost database) from all coming back at once.
 */
export interface BackoffPolicy extends Backoff {
  /** A child that ran at least this long before exiting counts as healthy: the next delay is `initialMs` again. */
  resetAfterMs: number;
  /** Consecutive quick crashes after which the supervisor gives up (no more restarts). */
  maxRestarts: number;
}

const DEFAULT_BACKOFF: BackoffPolicy = {
  initialMs: 1_000,
  maxMs: 30_000,
  resetAfterMs: 60_000,
  jitter: 0.2,
  maxRestarts: Infinity,
};

export interface ExitInfo {
  code: number | null;
  signal: NodeJS.Signals | null;
  /** True when this supervisor caused the exit (stop, kill9, signalAndWait). */
  expected: boolean;
  /** `exit code 1` or `signal SIGKILL`. */
  how: string;
  /** How long this incarnation ran. */
  ranMs: number;
}

export interface SupervisorEvents {
  /** Just before a child is spawned (e.g. to note where its log output will begin). */
  starting: [];
  spawn: [pid: number | undefined];
  ready: [];
  exit: [exit: ExitInfo];
  restarting: [delayMs: number, restart: number];
  'gave-up': [exit: ExitInfo, restarts: number];
}

type SupervisorLog = (
  message: string,
  fields: Record<string, unknown>,
  level: 'info' | 'warn' | 'error',
) => void;

export interface SupervisorOptions {
  name: string;
  /** The program; default this Node (process.execPath). Ignored with `launch`. */
  command?: string;
  args?: string[];
  env?: NodeJS.ProcessEnv;
  cwd?: string;
  uid?: number;
  gid?: number;
  /**
   * Starts the child some other way (e.g. `() => cluster.fork(env).process`). Such a child
   * is not in a process group of its own (signals go to it alone) and not leashed (a cluster
   * worker exits by itself when its primary's IPC channel closes).
   */
  launch?: () => ChildProcess;
  /** Gives the child an IPC channel; its messages go here. */
  onMessage?: (message: unknown) => void;
  /**
   * Where the child's stdout and stderr go: appended to `logFile` and/or split into lines for
   * `onLine`. With neither, the child shares this process's stdout and stderr.
   */
  logFile?: string;
  onLine?: (line: string) => void;
  /** Resolves once the child serves (a health URL answers, a log line appeared). */
  ready?: (supervisor: Supervisor) => Promise<void>;
  /** Restart policy; `false` never restarts (an unexpected exit is only reported). */
  restart?: Partial<BackoffPolicy> | false;
  /**
   * Asked on every unexpected exit before restarting: return false to not restart this one
   * (e.g. during a stack's start-up, where an exit must fail the start, not loop).
   */
  shouldRestart?: (exit: ExitInfo) => boolean;
  /** SIGTERM first, SIGKILL after this many ms (default 20 s). */
  stopGraceMs?: number;
  /** Human-readable lines about starts, exits and restarts. */
  log?: SupervisorLog;
  /** For tests of the jitter; default Math.random. */
  random?: () => number;
}

export class Supervisor extends EventEmitter<SupervisorEvents> {
  private child: ChildProcess | undefined;
  private exitedPromise: Promise<ExitInfo | undefined> = Promise.resolve(undefined);
  private startedAt = 0;
  /** True while this supervisor is stopping or killing the current child. */
  private expectingExit = false;
  /** False after stop(): nothing restarts until start() is called again. */
  private supervising = true;
  private restartTimer: NodeJS.Timeout | undefined;
  /** Consecutive quick crashes (for the backoff). */
  private crashes = 0;
  private readonly policy: BackoffPolicy | undefined;
  /** How many children have been spawned. */
  starts = 0;

  constructor(readonly options: SupervisorOptions) {
    super();
    this.policy = options.restart === false ? undefined : { ...DEFAULT_BACKOFF, ...options.restart };
  }

  get name(): string {
    return this.options.name;
  }

  get pid(): number | undefined {
    return this.child?.pid;
  }

  /** The current (or last) child, once one was spawned. */
  get process(): ChildProcess | undefined {
    return this.child;
  }

  get alive(): boolean {
    return !!this.child && this.child.exitCode === null && this.child.signalCode === null;
  }

  /** Resolves when the current child has exited (at once if there is none). */
  get exited(): Promise<ExitInfo | undefined> {
    return this.exitedPromise;
  }

  /** True while a restart is scheduled. */
  get restartPending(): boolean {
    return this.restartTimer !== undefined;
  }

  /**
   * Starts the child (unless one is running) and resolves once it is ready. Rejects if
   * it exits before it is ready or the ready hook fails. Resumes supervision after
   * stop() or kill9().
   */
  async start(): Promise<void> {
    this.supervising = true;
    this.cancelRestart();
    if (this.alive) return;
    await this.spawnAndWait();
  }

  private async spawnAndWait(): Promise<void> {
    const child = this.spawnChild();
    const exitedEarly = this.exitedPromise.then((exit) => {
      throw new Error(`${this.name} exited before it was ready (${exit?.how ?? 'unknown'})`);
    });
    exitedEarly.catch(() => undefined);
    if (this.options.ready) await Promise.race([this.options.ready(this), exitedEarly]);
    if (this.child === child) this.emit('ready');
  }

  private spawnChild(): ChildProcess {
    const o = this.options;
    this.expectingExit = false;
    this.emit('starting');
    let child: ChildProcess;
    if (o.launch) {
      child = o.launch();
      if (o.onLine) {
        for (const stream of [child.stdout, child.stderr]) {
          if (stream) readline.createInterface({ input: stream }).on('line', o.onLine);
        }
      }
    } else {
      const pipe = !!o.onLine;
      const fd = !pipe && o.logFile ? fs.openSync(o.logFile, 'a') : undefined;
      const out = pipe ? 'pipe' : (fd ?? 'inherit');
      try {
        child = spawnLeashed(o.command ?? process.execPath, o.args ?? [], {
          cwd: o.cwd,
          env: o.env,
          stdio: ['ignore', out, out, o.onMessage ? 'ipc' : 'ignore'],
          ...(o.uid !== undefined ? { uid: o.uid } : {}),
          ...(o.gid !== undefined ? { gid: o.gid } : {}),
        });
      } finally {
        if (fd !== undefined) fs.closeSync(fd);
      }
      if (pipe) {
        const file = o.logFile ? fs.createWriteStream(o.logFile, { flags: 'a' }) : undefined;
        for (const stream of [child.stdout!, child.stderr!]) {
          if (file) stream.pipe(file, { end: false });
          readline.createInterface({ input: stream }).on('line', o.onLine!);
        }
        if (file) child.once('close', () => file.end());
      }
    }
    if (o.onMessage) child.on('message', o.onMessage);
    // A failed spawn (ENOENT, EACCES) is reported as an exit; without a listener it would throw.
    child.once('error', () => undefined);
    this.child = child;
    this.starts++;
    this.startedAt = Date.now();
    this.exitedPromise = new Promise((resolve) => {
      let done = false;
      const onExit = (code: number | null, signal: NodeJS.Signals | null) => {
        if (done) return;
        done = true;
        const exit: ExitInfo = {
          code,
          signal,
          expected: this.expectingExit,
          how: signal ? `signal ${signal}` : `exit code ${code}`,
          ranMs: Date.now() - this.startedAt,
        };
        resolve(exit);
        this.onExit(exit);
      };
      child.once('exit', onExit);
      // A spawn that failed never emits 'exit'.
      child.once('error', () => {
        if (child.pid === undefined) onExit(null, null);
      });
    });
    this.log(`${this.name} started (pid ${child.pid})`, { pid: child.pid }, 'info');
    this.emit('spawn', child.pid);
    return child;
  }

  private onExit(exit: ExitInfo): void {
    this.emit('exit', exit);
    if (exit.expected || !this.supervising) return;
    const fields = { code: exit.code, signal: exit.signal };
    if (!this.policy || this.options.shouldRestart?.(exit) === false) {
      this.log(`${this.name} exited unexpectedly (${exit.how})`, fields, 'error');
      return;
    }
    this.crashes = exit.ranMs >= this.policy.resetAfterMs ? 1 : this.crashes + 1;
    if (this.crashes > this.policy.maxRestarts) {
      this.log(
        `${this.name} exited unexpectedly (${exit.how}); giving up after ${this.crashes - 1} quick restarts.`,
        fields,
        'error',
      );
      this.supervising = false;
      this.emit('gave-up', exit, this.crashes - 1);
      return;
    }
    const delay = backoffMs(this.policy, this.crashes - 1, this.options.random);
    this.log(
      `${this.name} exited unexpectedly (${exit.how}); restarting it in ${delay} ms (restart #${this.crashes}).`,
      { ...fields, restartInMs: delay, restart: this.crashes },
      'warn',
    );
    this.emit('restarting', delay, this.crashes);
    this.restartTimer = setTimeout(() => {
      this.restartTimer = undefined;
      if (!this.supervising || this.alive) return;
      this.spawnAndWait().catch((err: unknown) =>
        this.log(
          `${this.name} did not become ready after a restart: ${err instanceof Error ? err.message : String(err)}`,
          {},
          'warn',
        ),
      );
    }, delay);
  }

  private cancelRestart(): void {
    clearTimeout(this.restartTimer);
    this.restartTimer = undefined;
  }

  private log(message: string, fields: Record<string, unknown>, level: 'info' | 'warn' | 'error'): void {
    this.options.log?.(message, { process: this.name, ...fields }, level);
  }

  /** Signals the child's process group (or the child alone when it has none). */
  private signal(signal: NodeJS.Signals, group = true): void {
    const child = this.child;
    if (!child?.pid) return;
    if (group && !this.options.launch) {
      try {
        process.kill(-child.pid, signal);
        return;
      } catch {
        // No such group (already gone): try the process itself.
      }
    }
    try {
      child.kill(signal);
    } catch {
      /* already gone */
    }
  }

  /** Sends `signal`, then SIGKILL after `graceMs`, and waits for the exit. */
  private async terminate(
    signal: NodeJS.Signals,
    graceMs: number,
    group: boolean,
  ): Promise<ExitInfo | undefined> {
    if (!this.alive) return undefined;
    this.expectingExit = true;
    this.signal(signal, group);
    const timer = setTimeout(() => {
      this.log(`${this.name} did not exit within ${graceMs} ms of ${signal}; killing it`, {}, 'warn');
      this.signal('SIGKILL');
    }, graceMs);
    try {
      return await this.exitedPromise;
    } finally {
      clearTimeout(timer);
    }
  }

  /** Stops supervision and the child: SIGTERM to its group, SIGKILL after the grace period. */
  async stop(graceMs = this.options.stopGraceMs ?? 20_000): Promise<ExitInfo | undefined> {
    this.supervising = false;
    this.cancelRestart();
    return this.terminate('SIGTERM', graceMs, true);
  }

  /**
   * kill -9 of the child's whole group, on request (the chaos harness's faults). Not a
   * crash: nothing restarts it until start() is called.
   */
  async kill9(): Promise<ExitInfo | undefined> {
    this.cancelRestart();
    if (!this.alive) return undefined;
    this.expectingExit = true;
    this.signal('SIGKILL');
    return this.exitedPromise;
  }

  /**
   * Sends `signal` to the child alone (e.g. SIGINT for a Postgres fast shutdown), SIGKILL to
   * its group after `graceMs`. Nothing restarts it until start() is called.
   */
  async signalAndWait(signal: NodeJS.Signals, graceMs: number): Promise<ExitInfo | undefined> {
    this.cancelRestart();
    return this.terminate(signal, graceMs, false);
  }

  /** Last resort (this process is exiting): SIGKILL now, no waiting, no restart. */
  killNow(): void {
    this.supervising = false;
    this.cancelRestart();
    if (!this.alive) return;
    this.expectingExit = true;
    this.signal('SIGKILL');
  }
}
