/**
 * CPU time of other processes on this machine, from /proc (Linux), for the
 * benchmarks' "where the time goes" columns. Bench-only.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';

const CLK_TCK = (() => {
  try {
    return Number(execFileSync('getconf', ['CLK_TCK']).toString().trim()) || 100;
  } catch {
    return 100;
  }
})();

/** user + system CPU seconds of one process so far; 0 once it is gone (or without /proc). */
export function cpuSeconds(pid: number | undefined): number {
  if (!pid) return 0;
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(fields[11]) + Number(fields[12])) / CLK_TCK;
  } catch {
    return 0;
  }
}

/** True when this machine's /proc shows process `pid` (a local Postgres backend, say). */
export function visibleInProc(pid: number): boolean {
  return fs.existsSync(`/proc/${pid}/stat`);
}
