/**
 * Child processes of the chaos harness. Each onceflow service runs in its own
 * process group (detached), so `kill -9` reaches the whole process and Ctrl-C
 * on the harness never reaches it by accident: the harness decides.
 *
 * A `Supervised` process behaves like a service under systemd/Kubernetes: if
 * it exits while the harness did not ask for it, the exit is recorded (a
 * violation: onceflow processes must survive the faults) and it is restarted
 * after a short pause, so one defect does not hide the next one.
 */
import { spawn, type ChildProcess, type SpawnOptions } from 'node:child_process';
import fs from 'node:fs';

export interface ProcessSpec {
  name: string;
  command: string;
  args: string[];
  env: NodeJS.ProcessEnv;
  cwd: string;
  logFile: string;
  /** Resolves when the process is ready to serve; rejects on timeout. */
  ready: (p: Supervised) => Promise<void>;
  uid?: number;
  gid?: number;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export class Supervised {
  private child: ChildProcess | undefined;
  private exited: Promise<void> = Promise.resolve();
  /** True while the harness itself is stopping or killing this process. */
  private expectingExit = false;
  private supervising = true;
  private restartTimer: NodeJS.Timeout | undefined;
  /** Exits nobody asked for, since the last `takeUnexpectedExits()`. */
  private unexpected: string[] = [];
  starts = 0;
  /** Byte offset in the log where the current incarnation begins. */
  logOffset = 0;

  constructor(readonly spec: ProcessSpec) {}

  get name(): string {
    return this.spec.name;
  }

  get pid(): number | undefined {
    return this.child?.pid;
  }

  get alive(): boolean {
    return !!this.child && this.child.exitCode === null && this.child.signalCode === null;
  }

  async start(): Promise<void> {
    if (this.alive) return;
    clearTimeout(this.restartTimer);
    this.expectingExit = false;
    this.logOffset = fs.existsSync(this.spec.logFile) ? fs.statSync(this.spec.logFile).size : 0;
    const out = fs.openSync(this.spec.logFile, 'a');
    const options: SpawnOptions = {
      cwd: this.spec.cwd,
      env: this.spec.env,
      detached: true,
      stdio: ['ignore', out, out],
      ...(this.spec.uid !== undefined ? { uid: this.spec.uid } : {}),
      ...(this.spec.gid !== undefined ? { gid: this.spec.gid } : {}),
    };
    const child = spawn(this.spec.command, this.spec.args, options);
    fs.closeSync(out);
    this.child = child;
    this.starts++;
    this.exited = new Promise<void>((resolve) => {
      child.once('exit', (code, signal) => {
        if (!this.expectingExit) {
          const how = signal ? `signal ${signal}` : `exit code ${code}`;
          this.unexpected.push(`${how}${this.explainExit()}`);
          if (this.supervising) {
            // As a supervisor would: bring it back, so later checks still see a whole stack.
            this.restartTimer = setTimeout(() => void this.start().catch(() => undefined), 2_000);
          }
        }
        resolve();
      });
    });
    child.once('error', () => undefined); // spawn failures surface as an exit
    await this.spec.ready(this);
  }

  /** The log text of the current incarnation. */
  currentLog(): string {
    try {
      const fd = fs.openSync(this.spec.logFile, 'r');
      try {
        const size = fs.fstatSync(fd).size;
        const length = Math.max(0, size - this.logOffset);
        const buf = Buffer.alloc(length);
        fs.readSync(fd, buf, 0, length, this.logOffset);
        return buf.toString('utf8');
      } finally {
        fs.closeSync(fd);
      }
    } catch {
      return '';
    }
  }

  /** A short hint from the log: the line that best explains a crash (for Node, the error under the throw site). */
  private explainExit(): string {
    const lines = this.currentLog()
      .split('\n')
      .map((l) => l.trim())
      .filter(Boolean);
    // Node's own crash report (not our JSON 'unhandled error' log of a failed request); the last one is this exit's.
    const crash = /Unhandled 'error' event|triggerUncaughtException|UnhandledPromiseRejection/;
    let at = -1;
    lines.forEach((l, i) => {
      if (crash.test(l)) at = i;
    });
    let hint: string | undefined;
    if (at >= 0) {
      const cause = lines.slice(at + 1, at + 6).find((l) => /^\w*(error|Error)\b.*:/.test(l));
      hint = cause ? `${lines[at]!.replace(/^.*\/\/\s*/, '')}: ${cause}` : lines[at];
    } else {
      hint = [...lines].reverse().find((l) => /error|Error|57P01|ECONNREFUSED/.test(l));
    }
    return hint ? ` (log: ${hint.slice(0, 200)})` : '';
  }

  takeUnexpectedExits(): string[] {
    const out = this.unexpected;
    this.unexpected = [];
    return out;
  }

  /** kill -9 of the whole process group. The harness asked for it, so it is not a violation. */
  async kill9(): Promise<void> {
    clearTimeout(this.restartTimer);
    if (!this.alive || !this.child?.pid) return;
    this.expectingExit = true;
    signalGroup(this.child.pid, 'SIGKILL');
    await this.exited;
  }

  /** Sends a signal to the process itself (not the group), e.g. SIGINT for a Postgres fast shutdown. */
  async signalAndWait(signal: NodeJS.Signals, graceMs: number): Promise<void> {
    clearTimeout(this.restartTimer);
    if (!this.alive || !this.child?.pid) return;
    this.expectingExit = true;
    this.child.kill(signal);
    const timer = setTimeout(() => {
      if (this.child?.pid) signalGroup(this.child.pid, 'SIGKILL');
    }, graceMs);
    await this.exited;
    clearTimeout(timer);
  }

  /** Stops supervision and the process (SIGTERM, then SIGKILL after the grace period). */
  async stop(graceMs = 5_000): Promise<void> {
    this.supervising = false;
    clearTimeout(this.restartTimer);
    if (!this.alive || !this.child?.pid) return;
    this.expectingExit = true;
    signalGroup(this.child.pid, 'SIGTERM');
    const timer = setTimeout(() => {
      if (this.child?.pid) signalGroup(this.child.pid, 'SIGKILL');
    }, graceMs);
    await this.exited;
    clearTimeout(timer);
  }

  /** Last-resort cleanup (process exit): no waiting. */
  killNow(): void {
    this.supervising = false;
    clearTimeout(this.restartTimer);
    if (this.alive && this.child?.pid) {
      this.expectingExit = true;
      signalGroup(this.child.pid, 'SIGKILL');
    }
  }
}

function signalGroup(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-pid, signal);
  } catch {
    try {
      process.kill(pid, signal);
    } catch {
      /* already gone */
    }
  }
}

/** Polls `probe` until it resolves true, or throws after `timeoutMs` (or as soon as the process died). */
export async function waitUntil(
  what: string,
  probe: () => Promise<boolean>,
  timeoutMs: number,
  proc?: Supervised,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await probe().catch(() => false)) return;
    if (proc && !proc.alive) {
      throw new Error(`${what}: the process exited while starting; see ${proc.spec.logFile}`);
    }
    if (Date.now() > deadline) throw new Error(`${what} was not ready within ${timeoutMs / 1000}s`);
    await sleep(250);
  }
}

export async function httpOk(url: string): Promise<boolean> {
  const res = await fetch(url, { signal: AbortSignal.timeout(2_000) });
  await res.body?.cancel();
  return res.status < 500;
}
