/**
 * The leash: a child started for a long run (a service, a Temporal server, a
 * Postgres) exits when the process that started it is gone, however that
 * process died (SIGKILL, an OOM kill, a crashed terminal), so nothing is left
 * holding its ports. A child in a process group of its own (which the
 * supervisor needs for stopping it and what it started) never sees the
 * signals its parent's group gets.
 *
 * Each child gets a watchdog: a few lines of POSIX shell (so Go binaries and
 * Postgres are covered as well as Node, on Linux and macOS) that block on
 * reading one end of a pipe whose other end only this process holds. The
 * kernel closes that end when this process ends, whatever ended it: on that
 * EOF the watchdog sends its target `signal`, waits up to `graceMs` for it to
 * exit, then sends SIGKILL. When the child exits first, this process writes a
 * line down the pipe ("released") and the watchdog exits without a signal.
 */
import { spawn, type ChildProcess, type IOType } from 'node:child_process';
import type net from 'node:net';

/** How long a child has, after its parent is gone, between `signal` and SIGKILL. */
const LEASH_GRACE_MS = 5_000;

/**
 * The watchdog, reading the leash on stdin. Arguments: the signal, the grace in tenths of a
 * second, what to signal (a pid, or 0 for the watchdog's own process group) and the pid whose
 * exit ends the grace early. The stop signals of the group it may share are for the child. A
 * group gets its SIGKILL even when that pid is gone (what the child started may linger); a
 * lone pid only while it runs (a gone pid may be reused).
 */
const WATCHDOG = `trap '' HUP INT QUIT TERM
if read -r line; then exit 0; fi
kill -s "$1" "$3" 2>/dev/null
n=0
while [ "$n" -lt "$2" ] && kill -0 "$4" 2>/dev/null; do sleep 0.1; n=$((n + 1)); done
if [ "$3" = 0 ] || kill -0 "$4" 2>/dev/null; then kill -s KILL "$3" 2>/dev/null; fi`;

/** The fd on which the wrapper below gets the leash (0-2 are stdio, 3 may be Node's IPC channel). */
const LEASH_FD = 4;

/**
 * Starts the watchdog for the wrapper's own process group, then execs the child in its place:
 * the child keeps the pid, and the group, that was spawned. The watchdog is double-forked, so
 * it is not the child's child (a Postgres would take its exit for a crashed backend), and
 * re-executed, so `ps` shows it as onceflow-leash, not as a copy of the child's command line.
 */
const WRAPPER = `(/bin/sh -c "$1" onceflow-leash "$2" "$3" 0 $$ <&${LEASH_FD} >/dev/null 2>&1 3<&- ${LEASH_FD}<&- &)
shift 3
exec "$@" ${LEASH_FD}<&-`;

type Stdio = IOType | 'ipc' | number | null | undefined;

export interface LeashOptions {
  /** Sent when the parent is gone (default SIGTERM); SIGKILL follows after `graceMs`. */
  signal?: NodeJS.Signals;
  graceMs?: number;
}

export interface LeashedSpawnOptions extends LeashOptions {
  cwd?: string;
  env?: NodeJS.ProcessEnv;
  uid?: number;
  gid?: number;
  /** fds 0 to 3 of the child (3 may be 'ipc'); fd 4 is taken by the leash. */
  stdio: Stdio[];
}

function tenths(ms: number): string {
  return String(Math.max(0, Math.ceil(ms / 100)));
}

/** Lets the watchdog go once `child` has exited: it exits without signalling anything. */
function releaseOnExit(child: ChildProcess, leash: net.Socket | null | undefined): void {
  if (!leash) return;
  // The watchdog may be gone already (a kill -9 of the whole group): nothing to release.
  leash.on('error', () => undefined);
  child.once('exit', () => leash.end('\n'));
  // A spawn that failed never emits 'exit'.
  child.once('error', () => {
    if (child.pid === undefined) leash.destroy();
  });
}

/**
 * Spawns `command` as `spawn(command, args, { detached: true })` would: the same pid, a process
 * group (and session) of its own, so a signal to `-pid` reaches it and whatever it starts. When
 * this process is gone, the watchdog sends that group `signal`, then SIGKILL. Not for Windows.
 */
export function spawnLeashed(command: string, args: string[], options: LeashedSpawnOptions): ChildProcess {
  const { stdio: own, signal = 'SIGTERM', graceMs = LEASH_GRACE_MS, ...rest } = options;
  if (own.length > LEASH_FD) throw new Error(`spawnLeashed: fd ${LEASH_FD} and above are the leash's`);
  const stdio: Stdio[] = [...own];
  while (stdio.length < LEASH_FD) stdio.push('ignore');
  stdio.push('pipe');
  const child = spawn(
    '/bin/sh',
    [
      '-c',
      WRAPPER,
      'onceflow-leash',
      WATCHDOG,
      signal.replace(/^SIG/, ''),
      tenths(graceMs),
      command,
      ...args,
    ],
    // Detached: the watchdog signals its own process group, which must be the child's alone.
    { ...rest, stdio, detached: true },
  );
  releaseOnExit(child, child.stdio[LEASH_FD] as net.Socket | null | undefined);
  return child;
}

/**
 * Leashes a process some library started (embedded Postgres): when this process is gone, `pid`
 * alone gets `signal`, then SIGKILL. Call `release()` once it has exited, or before stopping it.
 */
export function leashProcess(pid: number, options: LeashOptions = {}): { release(): void } {
  const signal = (options.signal ?? 'SIGTERM').replace(/^SIG/, '');
  const watchdog = spawn(
    '/bin/sh',
    [
      '-c',
      WATCHDOG,
      'onceflow-leash',
      signal,
      tenths(options.graceMs ?? LEASH_GRACE_MS),
      String(pid),
      String(pid),
    ],
    // A group of its own: a Ctrl-C or kill of this process's group leaves it to do its job.
    { detached: true, stdio: ['pipe', 'ignore', 'ignore'] },
  );
  const leash = watchdog.stdin as net.Socket | null;
  leash?.on('error', () => undefined);
  // Neither keeps this process running.
  watchdog.unref();
  leash?.unref();
  return { release: () => leash?.end('\n') };
}
