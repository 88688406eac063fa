/**
 * The shipped dashboard and alert rules only use metrics the processes really
 * export, every expression parses as PromQL (the Prometheus project's own
 * parser), every alert is documented, and the compose `observability`
 * profile mounts files that exist, wired to each other.
 *
 * Exported names are read from live /metrics: the API built as
 * src/api/main.ts wires it, a worker process as
 * test/metrics/worker-metrics.test.ts starts one (after it has run workflow
 * and activity tasks), and a Temporal dev server of this file's own (the
 * server's own metrics, the same code as the server on Postgres).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import fs from 'node:fs';
import path from 'node:path';
import { parse as parseYaml } from 'yaml';
import { parser } from '@prometheus-io/lezer-promql';
import { buildApiServer } from '../../src/api/server.ts';
import { createMetrics } from '../../src/metrics/index.ts';
import { Ledger } from 'onceflow';
import { listParkedWorkflows } from '../../src/orders/attention.ts';
import { temporalClient, testPool, uniq } from '../support/env.ts';
import { until } from '../support/wait.ts';
import {
  ensureTemporalCli,
  startDevServerOnFreePorts,
  type DevServer,
} from '../../dev/devserver/temporal.ts';
import { freePort } from '../../src/process/ports.ts';
import { loadConfig } from '../../src/config.ts';
import os from 'node:os';
import {
  startWorkerMetricsFixture,
  type WorkerMetricsFixture,
} from '../metrics/fixtures/start-worker-metrics.ts';
import { testConfig } from '../api/support.ts';

const root = path.resolve(import.meta.dirname, '../..');
const read = (rel: string) => fs.readFileSync(path.join(root, rel), 'utf8');
const ALERTS = 'deploy/prometheus/alerts.yml';
const DASHBOARD = 'deploy/grafana/dashboards/onceflow.json';

/** Series Prometheus makes itself, not any process. */
const SYNTHETIC = ['up'];

/**
 * Temporal SDK counters the SDK creates on their first event only (a failed
 * workflow task, a cache miss, a failed poll): a healthy worker does not
 * export them yet. Each must be declared in the SDK core the installed
 * @temporalio/core-bridge ships (its Rust source, checked below), so a
 * misspelt name still fails.
 */
const SDK_ON_FIRST_EVENT = [
  'temporal_workflow_task_execution_failed',
  'temporal_sticky_cache_miss',
  'temporal_long_request_failure',
];
const SDK_CORE = 'node_modules/@temporalio/core-bridge/sdk-core/crates';

interface Rule {
  alert: string;
  expr: string;
  for?: string;
  labels?: { severity?: string };
  annotations?: Record<string, string>;
}

const rules = (): Rule[] =>
  (parseYaml(read(ALERTS)) as { groups: { name: string; rules: Rule[] }[] }).groups.flatMap((g) => g.rules);

interface Panel {
  type: string;
  title: string;
  datasource?: { uid: string };
  targets?: { expr: string; datasource?: { uid: string } }[];
}
const dashboard = () => JSON.parse(read(DASHBOARD)) as { uid: string; panels: Panel[] };

/** Grafana's variables are not PromQL; give them a value Prometheus would see. */
const grafanaToPromql = (expr: string) => expr.replaceAll('$__rate_interval', '5m');

/** The metric names one PromQL expression selects; throws on a syntax error. */
function metricNames(expr: string): string[] {
  const tree = parser.parse(expr);
  const names: string[] = [];
  const errors: number[] = [];
  tree.iterate({
    enter(node) {
      if (node.type.isError) errors.push(node.from);
      if (node.name === 'Identifier' && node.node.parent?.name === 'VectorSelector') {
        names.push(expr.slice(node.from, node.to));
      }
      if (node.name === 'UnquotedLabelMatcher' || node.name === 'QuotedLabelMatcher') {
        const text = expr.slice(node.from, node.to);
        const m = /^__name__\s*=\s*"([^"]+)"$/.exec(text);
        if (m) names.push(m[1]!);
      }
    },
  });
  if (errors.length) throw new Error(`PromQL syntax error at ${errors[0]} in: ${expr}`);
  return names;
}

function allExpressions(): { where: string; expr: string }[] {
  return [
    ...rules().map((r) => ({ where: `${ALERTS} ${r.alert}`, expr: r.expr })),
    ...dashboard().panels.flatMap((p) =>
      (p.targets ?? []).map((t) => ({ where: `${DASHBOARD} "${p.title}"`, expr: grafanaToPromql(t.expr) })),
    ),
  ];
}

/** Names a /metrics text exposes, including the series a histogram or summary expands to. */
function exposedNames(text: string): Set<string> {
  const names = new Set<string>();
  for (const m of text.matchAll(/^# TYPE (\S+) (\S+)/gm)) {
    const [, name, type] = m as unknown as [string, string, string];
    names.add(name);
    if (type === 'histogram') for (const s of ['_bucket', '_sum', '_count']) names.add(name + s);
    if (type === 'summary') for (const s of ['_sum', '_count']) names.add(name + s);
  }
  for (const m of text.matchAll(/^([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]/gm)) names.add(m[1]!);
  return names;
}

describe('PromQL in the dashboard and the alert rules', () => {
  it('the parser rejects broken PromQL (this check can fail)', () => {
    expect(() => metricNames('sum(rate(foo[5m])')).toThrow(/syntax error/);
    expect(metricNames('histogram_quantile(0.9, sum by (le) (rate(a_bucket{x="y"}[5m]))) / b')).toEqual([
      'a_bucket',
      'b',
    ]);
    expect(metricNames('{__name__="c"}')).toEqual(['c']);
  });

  it('every expression parses and selects at least one metric', () => {
    const exprs = allExpressions();
    expect(exprs.length).toBeGreaterThan(30);
    for (const { where, expr } of exprs) {
      expect(metricNames(expr).length, where).toBeGreaterThan(0);
    }
  });

  describe('every metric used is exported by the running API or worker', () => {
    let worker: WorkerMetricsFixture | undefined;
    let server: DevServer | undefined;
    let exported: Set<string>;

    beforeAll(async () => {
      // The API as src/api/main.ts serves it (metrics with a pool: the backlog gauges too).
      const config = testConfig();
      const pool = testPool(2);
      const { client, close } = await temporalClient();
      const metrics = createMetrics({
        pool,
        defaultLabels: { service: 'api' },
        parkedWorkflowIds: async () =>
          (await listParkedWorkflows(client, { limit: 1000 })).map((p) => p.workflowId),
      });
      const ledger = new Ledger(pool, { hooks: metrics.ledgerHooks });
      const app = await buildApiServer({ pool, ledger, temporal: client, config, metrics });
      await app.inject({ method: 'GET', url: '/healthz' });
      // What the API's metrics listener serves (API_METRICS_PORT): its registry, never the API port.
      const api = await metrics.registry.metrics();
      await app.close();
      await pool.end();

      // A worker process, started as test/metrics/worker-metrics.test.ts starts it, that has run
      // a workflow task and a failing activity task (the fixture's smoke activity throws), so the
      // SDK's task histograms and the activity failure counter exist.
      worker = await startWorkerMetricsFixture('assets');
      const handle = await client.workflow.start('smokeWorkflow', {
        taskQueue: worker.taskQueue,
        workflowId: uniq('assets-smoke'),
      });
      // The workflow fails with its activity; its second workflow task is served from the
      // sticky cache, so the hit counter exists too.
      await handle.result().catch(() => undefined);
      const url = worker.url;
      const workerBody = await until(
        'the worker to report its task metrics',
        async () => (await fetch(url)).text(),
        {
          done: (text) =>
            /^temporal_activity_execution_failed\{/m.test(text) && /^temporal_sticky_cache_hit\{/m.test(text),
          intervalMs: 250,
          timeoutMs: 60_000,
        },
      );
      await close();

      // The Temporal server's own metrics, from a dev server of this file's own.
      const cli = await ensureTemporalCli({ toolsDir: loadConfig().toolsDir });
      const metricsPort = await freePort();
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'assets-temporal-'));
      server = await startDevServerOnFreePorts({
        cli,
        ui: false,
        dbFile: path.join(dir, 'db.sqlite'),
        metricsPort,
      });
      const serverBody = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
      exported = new Set([...exposedNames(api), ...exposedNames(workerBody), ...exposedNames(serverBody)]);
    });

    afterAll(async () => {
      await worker?.stop();
      await server?.stop();
    });

    it('counters the SDK creates on their first event are declared by the installed SDK core', () => {
      const sources = fs
        .readdirSync(path.join(root, SDK_CORE), { recursive: true, encoding: 'utf8' })
        .filter((f) => f.endsWith('metrics.rs') && !f.includes('tests'))
        .map((f) => read(path.join(SDK_CORE, f)));
      expect(sources.length).toBeGreaterThan(0);
      for (const name of SDK_ON_FIRST_EVENT) {
        const declared = `name: "${name.replace(/^temporal_/, '')}".into()`;
        expect(
          sources.some((src) => src.includes(declared)),
          name,
        ).toBe(true);
        // Still the rule: it is not in the live scrape only because its event has not happened.
        expect(exported.has(name), `${name} is exported already: drop it from SDK_ON_FIRST_EVENT`).toBe(
          false,
        );
      }
    });

    it('no expression uses a name nobody exports', () => {
      expect(exported.has('onceflow_ledger_claims_total')).toBe(true);
      expect(exported.has('http_request_duration_seconds_bucket')).toBe(true);
      const used = new Map<string, string[]>();
      for (const { where, expr } of allExpressions()) {
        for (const name of metricNames(expr)) used.set(name, [...(used.get(name) ?? []), where]);
      }
      const missing = [...used.keys()].filter(
        (n) => !exported.has(n) && !SYNTHETIC.includes(n) && !SDK_ON_FIRST_EVENT.includes(n),
      );
      // The Temporal layer is covered: SDK task latencies and the server's persistence metrics.
      expect(exported.has('temporal_workflow_task_schedule_to_start_latency_bucket')).toBe(true);
      expect(exported.has('persistence_latency_bucket')).toBe(true);
      expect(missing, JSON.stringify(missing.map((n) => [n, used.get(n)]))).toEqual([]);
    });
  });
});

describe('alert rules', () => {
  it('each alert has a severity, a summary, a description and a documented runbook section', () => {
    const docs = read('docs/DASHBOARDS.md');
    const anchors = new Set(
      [...docs.matchAll(/^#+ (.+)$/gm)].map((m) =>
        m[1]!
          .trim()
          .toLowerCase()
          .replace(/[^\w\- ]/g, '')
          .replace(/ /g, '-'),
      ),
    );
    const all = rules();
    expect(all.length).toBeGreaterThanOrEqual(10);
    expect(new Set(all.map((r) => r.alert)).size).toBe(all.length);
    for (const r of all) {
      expect(['critical', 'warning', 'info'], r.alert).toContain(r.labels?.severity);
      expect(r.annotations?.summary, r.alert).toBeTruthy();
      expect(r.annotations?.description, r.alert).toBeTruthy();
      expect(r.annotations?.runbook_url, r.alert).toBe(`docs/DASHBOARDS.md#${r.alert.toLowerCase()}`);
      expect(anchors, `docs/DASHBOARDS.md has no section "${r.alert}"`).toContain(r.alert.toLowerCase());
      if (r.for !== undefined) expect(r.for, r.alert).toMatch(/^\d+[smh]$/);
    }
  });
});

describe('the dashboard', () => {
  it('covers the topics the operators need, all panels on the provisioned data source', () => {
    const d = dashboard();
    const ds = parseYaml(read('deploy/grafana/provisioning/datasources/prometheus.yml')) as {
      datasources: { uid: string; url: string }[];
    };
    const uid = ds.datasources[0]!.uid;
    const exprs = d.panels.flatMap((p) => (p.targets ?? []).map((t) => t.expr)).join('\n');
    for (const metric of [
      'http_requests_total',
      'http_request_duration_seconds_bucket',
      'onceflow_ledger_claims_total',
      'onceflow_ledger_replays_total',
      'onceflow_ledger_conflicts_total',
      'onceflow_ledger_takeovers_total',
      'onceflow_ledger_unknown_outcomes_total',
      'onceflow_ledger_oldest_age_seconds',
      'onceflow_outbox_unstarted_rows',
      'onceflow_outbox_oldest_unstarted_age_seconds',
      'needs_attention',
    ]) {
      expect(exprs, metric).toContain(metric);
    }
    for (const p of d.panels.filter((p) => p.type !== 'row')) {
      expect(p.datasource?.uid, p.title).toBe(uid);
      for (const t of p.targets ?? []) expect(t.datasource?.uid, p.title).toBe(uid);
    }
    expect(new Set(d.panels.map((p) => p.title)).size).toBe(d.panels.length);
  });
});

describe('docker-compose.yml, profile observability', () => {
  interface Service {
    image?: string;
    profiles?: string[];
    volumes?: string[];
    healthcheck?: { test: string[] };
    depends_on?: Record<string, { condition: string }>;
    command?: string[];
    environment?: Record<string, string>;
  }
  const compose = () => parseYaml(read('docker-compose.yml')) as { services: Record<string, Service> };
  const mounts = (s: Service) =>
    (s.volumes ?? []).map((v) => {
      const [source, target] = v.split(':') as [string, string];
      return { source, target };
    });

  it('runs Prometheus and Grafana only under the profile, with healthchecks and pinned images', () => {
    const { services } = compose();
    const observed = Object.entries(services).filter(([, s]) => s.profiles?.includes('observability'));
    expect(observed.map(([n]) => n).sort()).toEqual(['grafana', 'prometheus']);
    for (const [name, s] of observed) {
      expect(s.healthcheck?.test.length, name).toBeGreaterThan(0);
      expect(s.image, name).toMatch(/:v?\d+\.\d+\.\d+$/);
    }
    expect(services.grafana!.depends_on?.prometheus?.condition).toBe('service_healthy');
    // The default stack is unchanged: no other service joined a profile.
    for (const name of ['postgres', 'temporal', 'api', 'worker', 'sandbox']) {
      expect(services[name]?.profiles, name).toBeUndefined();
    }
  });

  it('mounts files that exist, and the mounted files reference each other correctly', () => {
    const { services } = compose();
    const prom = services.prometheus!;
    const graf = services.grafana!;
    for (const m of [...mounts(prom), ...mounts(graf)]) {
      expect(m.source.startsWith('./deploy/'), m.source).toBe(true);
      expect(fs.existsSync(path.join(root, m.source)), `${m.source} exists`).toBe(true);
    }
    const targetOf = (s: Service, source: string) => mounts(s).find((m) => m.source === source)?.target;

    // Prometheus: its config is where --config.file says, and loads the alerts from where they are mounted.
    const configPath = prom.command!.find((c) => c.startsWith('--config.file='))!.split('=')[1];
    expect(targetOf(prom, './deploy/prometheus/prometheus.yml')).toBe(configPath);
    const promConfig = parseYaml(read('deploy/prometheus/prometheus.yml')) as {
      rule_files: string[];
      scrape_configs: { job_name: string }[];
    };
    expect(promConfig.rule_files).toContain(targetOf(prom, `./${ALERTS}`));
    expect(promConfig.scrape_configs.map((s) => s.job_name).sort()).toEqual([
      'onceflow-api',
      'onceflow-worker',
      'temporal',
    ]);
    // Job temporal scrapes the port the server's PROMETHEUS_ENDPOINT listens on, by service name.
    const temporalJob = (
      promConfig.scrape_configs as { job_name: string; static_configs?: { targets: string[] }[] }[]
    ).find((j) => j.job_name === 'temporal')!;
    const endpoint = services.temporal!.environment?.PROMETHEUS_ENDPOINT ?? '';
    expect(endpoint).toMatch(/^0\.0\.0\.0:\d+$/);
    expect(temporalJob.static_configs?.[0]?.targets).toEqual([`temporal:${endpoint.split(':')[1]}`]);

    // Grafana: provisioning directories mounted where Grafana reads them; the dashboard provider
    // reads the directory the dashboard JSON is mounted in; the data source points at the service.
    expect(targetOf(graf, './deploy/grafana/provisioning/datasources')).toBe(
      '/etc/grafana/provisioning/datasources',
    );
    expect(targetOf(graf, './deploy/grafana/provisioning/dashboards')).toBe(
      '/etc/grafana/provisioning/dashboards',
    );
    const provider = parseYaml(read('deploy/grafana/provisioning/dashboards/onceflow.yml')) as {
      providers: { options: { path: string } }[];
    };
    expect(targetOf(graf, './deploy/grafana/dashboards')).toBe(provider.providers[0]!.options.path);
    const ds = parseYaml(read('deploy/grafana/provisioning/datasources/prometheus.yml')) as {
      datasources: { url: string }[];
    };
    expect(ds.datasources[0]!.url).toBe('http://prometheus:9090');
  });
});
