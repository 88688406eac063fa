/**
 * docker-compose.yml cannot run here (no Docker), so this reads it as
 * closely as reading can: the images are the pinned versions (the Temporal
 * server the project builds, the Postgres major the tests run on), no
 * deprecated auto-setup image, every long-running service has a healthcheck,
 * every dependency exists and waits for the right condition, the worker's
 * stop grace period outlasts its drain, the Temporal setup jobs register what
 * the workflow needs, and the app's environment points at the services.
 */
import { describe, expect, it } from 'vitest';
import fs from 'node:fs';
import path from 'node:path';
import { parse as parseYaml } from 'yaml';
import { loadConfig, requireCredentials } from '../../src/config.ts';
import { OrderLastErrorKey, OrderStatusKey, TenantIdKey } from '../../src/orders/contract.ts';
import {
  TEMPORAL_HISTORY_SHARDS,
  TEMPORAL_SERVER_VERSION,
  TEMPORAL_UI_SERVER_VERSION,
} from '../../src/devserver/temporal-server.ts';
import { testPool } from '../support/env.ts';

const root = path.resolve(import.meta.dirname, '../..');
const read = (rel: string) => fs.readFileSync(path.join(root, rel), 'utf8');

interface Healthcheck {
  test?: string[] | string;
  disable?: boolean;
}
interface Service {
  image?: string;
  build?: unknown;
  command?: string[] | string;
  entrypoint?: string[] | string;
  environment?: Record<string, string | number>;
  depends_on?: Record<string, { condition: string }> | string[];
  healthcheck?: Healthcheck;
  restart?: string;
  stop_grace_period?: string;
  profiles?: string[];
  ports?: string[];
  volumes?: string[];
}
interface Compose {
  services: Record<string, Service>;
  'x-onceflow-env': Record<string, string>;
}

// Compose resolves `<<` merge keys; so does this parse.
const compose = parseYaml(read('docker-compose.yml'), { merge: true }) as Compose;
const services = Object.entries(compose.services);
const service = (name: string) => {
  const s = compose.services[name];
  if (!s) throw new Error(`docker-compose.yml has no service ${name}`);
  return s;
};
/** A job runs once and exits: compose must not restart it, and nothing waits for it to be "healthy". */
const isJob = (s: Service) => s.restart === 'no';
const script = (s: Service) => [s.entrypoint, s.command].flat().filter(Boolean).join('\n');
const tag = (image: string) => image.slice(image.lastIndexOf(':') + 1);

/** Compose durations: 1m30s, 30s, 500ms, 2h. */
function seconds(duration: string): number {
  let total = 0;
  const re = /(\d+(?:\.\d+)?)(h|ms|m|s|us)/g;
  let m: RegExpExecArray | null;
  let consumed = '';
  while ((m = re.exec(duration))) {
    consumed += m[0];
    const n = Number(m[1]);
    total += n * { h: 3600, m: 60, s: 1, ms: 0.001, us: 0.000001 }[m[2] as 'h' | 'm' | 's' | 'ms' | 'us'];
  }
  if (consumed !== duration) throw new Error(`not a compose duration: ${duration}`);
  return total;
}

/** The worker's drain: shutdownGraceTime in its composition root. */
function workerDrainSeconds(): number {
  const m = /shutdownGraceTime:\s*'(\d+) seconds?'/.exec(read('src/worker/main.ts'));
  if (!m) throw new Error("src/worker/main.ts no longer sets shutdownGraceTime: '<n> seconds'");
  return Number(m[1]);
}

describe('docker-compose.yml', () => {
  it('runs the Temporal server the project builds, set up by admin-tools of the same release', () => {
    const version = TEMPORAL_SERVER_VERSION.replace(/^v/, '');
    expect(service('temporal').image).toBe(`temporalio/server:${version}`);
    const adminTools = services.filter(([, s]) => s.image?.startsWith('temporalio/admin-tools:'));
    expect(adminTools.map(([n]) => n).sort()).toEqual(['temporal-namespace', 'temporal-schema']);
    for (const [name, s] of adminTools) {
      // Tags are `<server>` or `<server>-tctl-<x.y.z>-cli-<x.y.z>` (Temporal's compose samples).
      const escaped = version.replace(/\./g, '\\.');
      expect(tag(s.image!), name).toMatch(
        new RegExp(`^${escaped}(-tctl-\\d+\\.\\d+\\.\\d+-cli-\\d+\\.\\d+\\.\\d+)?$`),
      );
    }
    // The same UI the project builds from its module for TEMPORAL_BACKEND=postgres.
    expect(service('temporal-ui').image).toBe(
      `temporalio/ui:${TEMPORAL_UI_SERVER_VERSION.replace(/^v/, '')}`,
    );
    // The history shard count is fixed for a cluster's life: the same as the built server's config.
    expect(String(service('temporal').environment?.NUM_HISTORY_SHARDS)).toBe(String(TEMPORAL_HISTORY_SHARDS));
    for (const [name, s] of services) {
      expect(s.image ?? '', name).not.toMatch(/auto-setup/);
      // Every image pinned to a version, never latest or untagged.
      if (s.image) expect(s.image, name).toMatch(/:v?\d+(\.\d+)*(-[\w.-]+)?$/);
      else expect(s.build, `${name} has an image or a build`).toBeDefined();
    }
  });

  it('uses the Postgres major version the tests run on', async () => {
    const pool = testPool(1);
    try {
      const { rows } = await pool.query<{ v: string }>(`select current_setting('server_version_num') as v`);
      const major = Math.floor(Number(rows[0]!.v) / 10_000);
      expect(service('postgres').image).toBe(`postgres:${major}`);
    } finally {
      await pool.end();
    }
  });

  it('has a healthcheck on every long-running service, and one-shot jobs are awaited by completion', () => {
    const jobs = new Set(services.filter(([, s]) => isJob(s)).map(([n]) => n));
    expect([...jobs].sort()).toEqual(['migrate', 'temporal-namespace', 'temporal-schema']);
    for (const [name, s] of services) {
      if (jobs.has(name)) continue;
      expect(s.healthcheck?.disable, name).not.toBe(true);
      const test = [s.healthcheck?.test ?? []].flat();
      expect(test.length, `${name} healthcheck`).toBeGreaterThan(1);
      expect(['CMD', 'CMD-SHELL'], name).toContain(test[0]);
    }
    for (const [name, s] of services) {
      // The long form only: a bare list would start dependents before their dependency is ready.
      expect(Array.isArray(s.depends_on), `${name} depends_on uses conditions`).toBe(false);
      for (const [target, { condition }] of Object.entries(s.depends_on ?? {})) {
        expect(compose.services[target], `${name} depends on ${target}, which exists`).toBeDefined();
        const expected = jobs.has(target) ? 'service_completed_successfully' : 'service_healthy';
        expect(condition, `${name} -> ${target}`).toBe(expected);
      }
    }
  });

  it('gives the worker (and the API) longer to stop than the worker drains', () => {
    const drain = workerDrainSeconds();
    expect(drain).toBeGreaterThan(0);
    for (const name of ['worker', 'api']) {
      const grace = service(name).stop_grace_period;
      expect(grace, `${name} stop_grace_period`).toBeDefined();
      // Compose's default is 10 s; the drain alone may take that long, closing needs more.
      expect(seconds(grace!), name).toBeGreaterThan(drain);
    }
  });

  it('sets up Temporal on the compose Postgres: both databases, the namespace and the search attributes', () => {
    const pg = service('postgres').environment!;
    const schema = service('temporal-schema');
    const server = service('temporal');
    for (const s of [schema, server]) {
      const env = s.environment!;
      expect(env.DB).toBe('postgres12');
      expect(env.POSTGRES_SEEDS).toBe('postgres');
      expect(String(env.DB_PORT)).toBe('5432');
      expect(env.POSTGRES_USER).toBe(pg.POSTGRES_USER);
      expect(env.POSTGRES_PWD).toBe(pg.POSTGRES_PASSWORD);
    }
    expect(schema.environment!.SQL_PASSWORD).toBe(pg.POSTGRES_PASSWORD);
    expect(server.environment!.BIND_ON_IP).toBe('0.0.0.0');
    const setup = script(schema);
    for (const word of ['temporal-sql-tool', 'create', 'setup-schema', 'update-schema', 'postgres12']) {
      expect(setup).toContain(word);
    }
    for (const dir of ['v12/$${db##*:}/versioned', 'temporal:temporal', 'temporal_visibility:visibility']) {
      expect(setup).toContain(dir);
    }
    expect(server.depends_on).toEqual({ 'temporal-schema': { condition: 'service_completed_successfully' } });

    // The dynamic config file the server is pointed at is mounted from the repo.
    const dyn = String(server.environment!.DYNAMIC_CONFIG_FILE_PATH);
    const mount = (server.volumes ?? []).map((v) => v.split(':')).find(([, target]) => target!.endsWith(dyn));
    expect(mount, `a volume mounted at .../${dyn}`).toBeDefined();
    expect(fs.existsSync(path.join(root, mount![0]!))).toBe(true);
    expect(parseYaml(read(mount![0]!))).toBeTypeOf('object');

    const ns = service('temporal-namespace');
    const register = script(ns);
    expect(ns.environment!.TEMPORAL_ADDRESS).toBe('temporal:7233');
    expect(ns.environment!.NAMESPACE).toBe(compose['x-onceflow-env'].TEMPORAL_NAMESPACE);
    expect(register).toContain('operator namespace create');
    for (const key of [OrderStatusKey, TenantIdKey, OrderLastErrorKey]) {
      const registered = new RegExp(`\\b${key.name}=(\\w+)`).exec(register)?.[1];
      expect(registered?.toUpperCase(), key.name).toBe(key.type.toUpperCase());
    }
  });

  it('gives every onceflow process an environment that points at the services and passes its checks', () => {
    const env = compose['x-onceflow-env'];
    for (const name of ['migrate', 'sandbox', 'worker', 'api']) {
      expect(service(name).environment, name).toEqual(env);
      expect(service(name).build, name).toBe('.');
    }
    const pg = service('postgres').environment!;
    const db = new URL(env.DATABASE_URL!);
    expect(db.hostname).toBe('postgres');
    expect(decodeURIComponent(db.username)).toBe(pg.POSTGRES_USER);
    expect(decodeURIComponent(db.password)).toBe(pg.POSTGRES_PASSWORD);
    expect(db.pathname).toBe(`/${pg.POSTGRES_DB}`);
    expect(env.TEMPORAL_ADDRESS).toBe('temporal:7233');
    expect(new URL(env.SANDBOX_URL!).host).toBe('sandbox:4010');
    expect(new URL(env.WEBHOOK_URL!).host).toBe('api:3000');
    expect(env.BIND_HOST).toBe('0.0.0.0');

    // With the required secrets given (compose refuses to start without them), the config loads
    // and the credential checks pass on the exposed bind.
    const resolved = Object.fromEntries(
      Object.entries(env).map(([k, v]) => [
        k,
        /^\$\{\w+:\?/.test(v) ? `${k.toLowerCase()}_from_env_file` : v,
      ]),
    );
    expect(env.WEBHOOK_SECRET).toMatch(/^\$\{WEBHOOK_SECRET:\?/);
    expect(env.ONCEFLOW_ADMIN_TOKEN).toMatch(/^\$\{ONCEFLOW_ADMIN_TOKEN:\?/);
    const config = loadConfig(resolved, '/app');
    expect(() => requireCredentials(config, ['adminToken', 'webhookSecret'])).not.toThrow();

    // Ports: what each process listens on is what compose publishes and health-checks.
    expect(service('api').ports).toContain(`3000:${config.ports.api}`);
    expect(service('sandbox').ports).toContain(`4010:${config.ports.sandbox}`);
    expect(service('worker').ports).toEqual([String(config.ports.workerMetrics)]);
    expect([service('worker').healthcheck!.test].flat().join(' ')).toContain(
      `:${config.ports.workerMetrics}/metrics`,
    );
    expect([service('api').healthcheck!.test].flat().join(' ')).toContain(`:${config.ports.api}/healthz`);
    expect([service('sandbox').healthcheck!.test].flat().join(' ')).toContain(
      `:${config.ports.sandbox}/healthz`,
    );
  });

  it('builds the workflow bundle once, in the image, after the code it bundles', () => {
    const dockerfile = read('Dockerfile').split('\n');
    const build = dockerfile.findIndex((l) => /^RUN .*scripts\/build-workflow-bundle\.ts/.test(l));
    expect(build, 'Dockerfile builds the bundle').toBeGreaterThan(0);
    for (const dir of ['src', 'workflows', 'activities']) {
      const copy = dockerfile.findIndex((l) => new RegExp(`^COPY ${dir} `).test(l));
      expect(copy, `COPY ${dir}`).toBeGreaterThan(0);
      expect(copy, `COPY ${dir} before the bundle`).toBeLessThan(build);
    }
    // Workers in compose find it themselves (by hash), so none overrides the path.
    expect(compose['x-onceflow-env'].WORKFLOW_BUNDLE_PATH).toBeUndefined();
  });
});
