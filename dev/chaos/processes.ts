/**
 * Child processes of the chaos harness, run by the one supervisor
 * (src/process/supervisor.ts). Each onceflow service runs in its own process
 * group, so `kill -9` reaches the whole process and Ctrl-C on the harness
 * never reaches it by accident: the harness decides.
 *
 * A `Supervised` process behaves like a service under systemd/Kubernetes: if
 * it exits while the harness did not ask for it, the exit is recorded (a
 * violation: onceflow processes must survive the faults) and it is restarted
 * after a short pause, so one defect does not hide the next one.
 */
import fs from 'node:fs';
import { Supervisor } from '../../src/process/supervisor.ts';
import { pollUntil } from '../wait.ts';

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

export class Supervised extends Supervisor {
  /** Exits nobody asked for, since the last `takeUnexpectedExits()`. */
  private unexpected: string[] = [];
  /** Byte offset in the log where the current incarnation begins. */
  logOffset = 0;

  constructor(readonly spec: ProcessSpec) {
    super({
      name: spec.name,
      command: spec.command,
      args: spec.args,
      env: spec.env,
      cwd: spec.cwd,
      logFile: spec.logFile,
      ...(spec.uid !== undefined ? { uid: spec.uid } : {}),
      ...(spec.gid !== undefined ? { gid: spec.gid } : {}),
      ready: () => spec.ready(this),
      // A fixed 2 s pause, no growth and no jitter: a run's scenarios stay comparable with
      // the committed results, and one crash never keeps a service away for long.
      restart: { initialMs: 2_000, maxMs: 2_000, jitter: 0 },
      stopGraceMs: 5_000,
    });
    this.on('starting', () => {
      this.logOffset = fs.existsSync(spec.logFile) ? fs.statSync(spec.logFile).size : 0;
    });
    this.on('exit', (exit) => {
      if (!exit.expected) this.unexpected.push(`${exit.how}${this.explainExit()}`);
    });
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
}

/** Polls `probe` (src/process/wait.ts) until it resolves true; gives up at once if `proc` died. */
export function waitUntil(
  what: string,
  probe: () => Promise<boolean>,
  timeoutMs: number,
  proc?: Supervised,
): Promise<void> {
  const abandon = () =>
    proc && !proc.alive ? `the process exited while starting; see ${proc.spec.logFile}` : undefined;
  return pollUntil(what, probe, { timeoutMs, abandon });
}
