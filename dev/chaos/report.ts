/** The chaos run's table (and its JSON form). */
import type { Violation, ViolationKind } from './invariants.ts';
import type { ScenarioResult } from './run.ts';
import { PROBE_TAIL_MS, type ProbeReport } from './probe.ts';

const count = (vs: readonly Violation[], ...kinds: ViolationKind[]) =>
  vs.filter((v) => kinds.includes(v.kind)).length;

export function formatTable(results: readonly ScenarioResult[], settleSeconds: number): string {
  const header = [
    'scenario',
    'result',
    'accepted',
    'completed',
    'rejected',
    'attention',
    'stuck',
    'refunds',
    `settled<=${settleSeconds}s`,
    'slowest order',
    'double charge/receipt/refund',
    'over refund',
    'lost',
    'proc exits',
    'fail-fast',
    'events (+redelivered)',
    'event missing/double',
    'other',
    'secs',
  ];
  const rows = results.map((r) => {
    const v = r.violations;
    return [
      r.scenario,
      r.status,
      r.status === 'SKIP' ? '-' : `${r.counts.accepted}/${r.counts.submitted}`,
      String(r.counts.completed),
      String(r.counts.rejected),
      String(r.counts.attention),
      String(r.counts.stuck),
      r.status === 'SKIP' ? '-' : String(r.counts.refunds),
      r.status === 'SKIP' ? '-' : r.settledAfterSeconds === null ? 'NO' : `yes (${r.settledAfterSeconds}s)`,
      r.slowestOrderSeconds === null ? '-' : `${r.slowestOrderSeconds}s`,
      `${count(v, 'double_charge')}/${count(v, 'double_receipt')}/${count(v, 'double_refund')}`,
      String(count(v, 'over_refund')),
      String(count(v, 'lost_order')),
      String(count(v, 'process_exited')),
      r.probe ? String(count(v, 'server_error', 'slow_answer', 'no_answer')) : '-',
      r.webhooks ? `${r.webhooks.events} (+${r.webhooks.redeliveries})` : '-',
      r.webhooks ? `${count(v, 'missing_event')}/${count(v, 'double_event')}` : '-',
      String(
        count(
          v,
          'duplicate_order',
          'not_accepted',
          'unexpected_outcome',
          'stuck_refund',
          'restart_failed',
          'check_failed',
          'replay_mismatch',
          'recovery_failed',
          'bad_delivery',
          'stuck_delivery',
        ),
      ),
      String(r.seconds),
    ];
  });
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((row) => row[i]!.length)));
  const line = (cells: string[]) =>
    cells
      .map((c, i) => c.padEnd(widths[i]!))
      .join('  ')
      .trimEnd();
  const out = [line(header), widths.map((w) => '-'.repeat(w)).join('  '), ...rows.map(line)];

  out.push('', 'faults:');
  for (const r of results) out.push(`  ${r.scenario.padEnd(18)} ${r.fault} -> ${r.note}`);

  const probed = results.filter((r) => r.probe);
  if (probed.length) {
    const p = probed[0]!.probe!;
    out.push(
      '',
      `fail-fast probe (a request every ${p.intervalMs} ms until ${PROBE_TAIL_S} s after the heal; ` +
        `bound ${p.boundMs / 1000} s, client timeout ${p.clientTimeoutMs / 1000} s):`,
    );
    for (const r of probed) out.push(...probeLines(r.scenario, r.probe!));
  }

  const failing = results.filter((r) => r.violations.length > 0);
  if (failing.length) {
    out.push('', 'violations (first 8 per kind and scenario):');
    for (const r of failing) {
      const byKind = new Map<string, Violation[]>();
      for (const v of r.violations) byKind.set(v.kind, [...(byKind.get(v.kind) ?? []), v]);
      for (const [kind, list] of byKind) {
        out.push(
          `  ${r.scenario} ${kind} x${list.length}${kind === 'stuck_order' ? ` (${stuckSummary(list)})` : ''}`,
        );
        for (const v of list.slice(0, 8)) out.push(`    ${v.subject}: ${v.detail}`);
      }
    }
  }
  return out.join('\n');
}

const PROBE_TAIL_S = PROBE_TAIL_MS / 1000;

const statuses = (s: Record<string, number>) =>
  Object.entries(s)
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([k, n]) => `${k} x${n}`)
    .join(', ');

/** One line of totals and violations, then one per route: statuses, max and p99. */
function probeLines(scenario: string, p: ProbeReport): string[] {
  const lines = [
    `  ${scenario.padEnd(18)} ${p.requests} requests: ${p.serverErrors} x 500, ${p.slow} slower than ` +
      `${p.boundMs / 1000} s, ${p.noAnswer} without an answer; max ${p.maxMs} ms, p99 ${p.p99Ms} ms`,
  ];
  for (const [route, r] of Object.entries(p.routes)) {
    lines.push(
      `  ${''.padEnd(18)}   ${route.padEnd(20)} ${String(r.requests).padStart(3)}: ${statuses(r.statuses)}; max ${r.maxMs} ms, p99 ${r.p99Ms} ms`,
    );
  }
  return lines;
}

/** Short summary of what kept orders from settling (status histogram), for the log. */
function stuckSummary(violations: readonly Violation[]): string {
  const byStatus = new Map<string, number>();
  for (const v of violations) {
    if (v.kind !== 'stuck_order') continue;
    const m = /still (\w+)/.exec(v.detail);
    const k = m ? m[1]! : v.detail;
    byStatus.set(k, (byStatus.get(k) ?? 0) + 1);
  }
  return [...byStatus].map(([k, n]) => `${k} x${n}`).join(', ');
}
