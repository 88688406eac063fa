/**
 * docker-compose.yml cannot run here (no Docker), so this reads it as
 * closely as reading can: the images are the pinned versions (the Temporal
 * server the project builds, the Postgres major the tests run on), no
 * deprecated auto-setup image, every long-running service has a healthcheck,
 * every dependency exists and waits for the right condition, the worker's
 * stop grace period outlasts its drain, the Temporal setup jobs register what
 * the workflow needs, the app's environment points at the services, and no
 * port but the API's is published beyond loopback (the API's only on request).
 */
import { describe, expect, it } from 'vitest';
import fs from 'node:fs';
import path from 'node:path';
import { isIP } from 'node:net';
import { randomBytes } from 'node:crypto';
import { parse as parseYaml } from 'yaml';
import { loadConfig, requireCredentials } from '../../src/config.ts';
import { OrderLastErrorKey, OrderStatusKey, TenantIdKey } from '../../src/orders/contract.ts';
import {
  TEMPORAL_DYNAMIC_CONFIG_FILE,
  TEMPORAL_HISTORY_SHARDS,
  TEMPORAL_PERSISTENCE,
  TEMPORAL_SERVER_VERSION,
  TEMPORAL_UI_SERVER_VERSION,
} from '../../dev/devserver/temporal-server.ts';
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
  pull_policy?: string;
  command?: string[] | string;
  entrypoint?: string[] | string;
  environment?: Record<string, string | number>;
  depends_on?: Record<string, { condition: string }> | string[];
  healthcheck?: Healthcheck;
  restart?: string;
  stop_grace_period?: string;
  profiles?: string[];
  /** Short syntax (string or number) or long syntax ({ target, published, host_ip }). */
  ports?: unknown[];
  expose?: (string | number)[];
  network_mode?: string;
  networks?: string[] | Record<string, unknown>;
  volumes?: string[];
}
interface NetworkDef {
  name?: string;
  driver?: string;
}
interface Compose {
  services: Record<string, Service>;
  networks?: Record<string, NetworkDef | null>;
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
// A one-shot job runs to completion, so it has no healthcheck to wait on.
const isJob = (s: Service) => s.healthcheck?.disable === true;
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

/**
 * The onceflow processes' config under compose, with the required secrets given as the docs say to
 * make them (`openssl rand -hex 32` in .env): compose refuses to start without them.
 */
function composeConfig() {
  const env = compose['x-onceflow-env'];
  const resolved = Object.fromEntries(
    Object.entries(env).map(([k, v]) => [
      k,
      /^\$\{\w+:\?/.test(v) ? randomBytes(32).toString('hex') : interpolate(v, () => undefined),
    ]),
  );
  return loadConfig(resolved, '/app');
}

/**
 * Compose's interpolation (docs.docker.com/reference/compose-file/interpolation) over `env`: `$$` is a
 * literal `$`; `${V:-d}` / `${V-d}` take `d` when V is empty / unset; `${V:+a}` / `${V+a}` take `a` when
 * it is set; `${V:?e}` / `${V?e}` refuse to start without V; `${V}` and `$V` are empty when unset.
 */
function interpolate(text: string, env: (name: string) => string | undefined): string {
  let out = '';
  for (let i = 0; i < text.length; i++) {
    if (text[i] !== '$') {
      out += text[i];
      continue;
    }
    if (text[i + 1] === '$') {
      out += '$';
      i++;
      continue;
    }
    if (text[i + 1] !== '{') {
      const name = /^[A-Za-z_]\w*/.exec(text.slice(i + 1))?.[0];
      if (!name) throw new Error(`bad interpolation in ${JSON.stringify(text)}`);
      out += env(name) ?? '';
      i += name.length;
      continue;
    }
    // Find the matching brace: defaults may nest further ${...}.
    let depth = 0;
    let end = i + 1;
    for (; end < text.length; end++) {
      if (text[end] === '{') depth++;
      else if (text[end] === '}' && --depth === 0) break;
    }
    const m = /^([A-Za-z_]\w*)(?:(:?[-+?])([\s\S]*))?$/.exec(text.slice(i + 2, end));
    if (end >= text.length || !m) throw new Error(`bad interpolation in ${JSON.stringify(text)}`);
    const [, name, op, arg = ''] = m as unknown as [string, string, string | undefined, string | undefined];
    const value = env(name);
    const set = op?.startsWith(':') ? Boolean(value) : value !== undefined;
    if (op?.endsWith('-')) out += set ? value : interpolate(arg, env);
    else if (op?.endsWith('+')) out += set ? interpolate(arg, env) : '';
    else if (op?.endsWith('?')) {
      if (!set) throw new Error(`\${${name}} is required: it has no default`);
      out += value;
    } else out += value ?? '';
    i = end;
  }
  return out;
}

/** Where one `ports:` entry (short or long syntax) publishes: host_ip '' means every interface. */
function portBinding(
  entry: unknown,
  env: (name: string) => string | undefined,
): { hostIp: string; target: string } {
  if (typeof entry === 'object' && entry !== null) {
    const long = entry as { target: unknown; host_ip?: unknown };
    return {
      hostIp: interpolate(String(long.host_ip ?? ''), env),
      target: interpolate(String(long.target), env),
    };
  }
  // [[HOST_IP:]PUBLISHED:]TARGET[/PROTOCOL]; an IPv6 HOST_IP is in brackets.
  const short = interpolate(String(entry), env).replace(/\/\w+$/, '');
  const v6 = /^\[([^\]]*)\]:(.*)$/.exec(short);
  if (v6) return { hostIp: v6[1]!, target: v6[2]!.split(':').at(-1)! };
  const parts = short.split(':');
  return { hostIp: parts.length >= 3 ? parts.slice(0, -2).join(':') : '', target: parts.at(-1)! };
}

/** Docker takes an IP literal here; anything else (including '', every interface) is not loopback. */
function isLoopbackIp(ip: string): boolean {
  if (isIP(ip) === 4) return ip.startsWith('127.');
  return isIP(ip) === 6 && /^(0{0,4}:){2,7}0{0,3}1$|^::1$/i.test(ip);
}

/** Compose with nothing set in the environment or .env: what `docker compose up` publishes as shipped. */
const nothingSet = () => undefined;
/** Every variable set to the value that publishes everywhere: what a user's .env could do. */
const everythingPublic = () => '0.0.0.0';
/** The variable a user sets to publish the API beyond loopback (docs/DEPLOYING.md). */
const API_PUBLISH_VARIABLE = 'API_PUBLISH_HOST';

/**
 * Every `ports:` entry of `doc` that reaches beyond loopback: by default (nothing set), or, for any
 * port but the API's own, from any environment a user could write.
 */
function portsBeyondLoopback(doc: Pick<Compose, 'services'>, apiPort: number): string[] {
  const found: string[] = [];
  for (const [name, s] of Object.entries(doc.services)) {
    for (const entry of s.ports ?? []) {
      const shown = `${name}: ports ${JSON.stringify(entry)}`;
      let byDefault: { hostIp: string; target: string };
      try {
        byDefault = portBinding(entry, nothingSet);
      } catch (err) {
        found.push(`${shown}: ${(err as Error).message}`);
        continue;
      }
      if (!isLoopbackIp(byDefault.hostIp)) {
        found.push(`${shown} is published on ${byDefault.hostIp || 'every interface'} by default`);
        continue;
      }
      const isApiPort = name === 'api' && byDefault.target === String(apiPort);
      const anyEnv = portBinding(entry, everythingPublic).hostIp;
      if (!isApiPort && !isLoopbackIp(anyEnv)) {
        found.push(`${shown} can be published on ${anyEnv || 'every interface'} from the environment`);
      }
    }
  }
  return found;
}

/** Services on the host's network stack, where a container's 0.0.0.0 is the host's and `ports` is moot. */
function onHostNetwork(doc: Pick<Compose, 'services' | 'networks'>): string[] {
  const hostNetworks = new Set(
    Object.entries(doc.networks ?? {})
      .filter(([key, n]) => key === 'host' || n?.name === 'host' || n?.driver === 'host')
      .map(([key]) => key),
  );
  return Object.entries(doc.services)
    .filter(([, s]) => {
      const joined = Array.isArray(s.networks) ? s.networks : Object.keys(s.networks ?? {});
      return s.network_mode === 'host' || joined.some((n) => hostNetworks.has(n));
    })
    .map(([name]) => name);
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
    // Images built here (a service's `build`, tagged by its `image`) are exempt from pinning.
    const builtHere = new Set(services.flatMap(([, s]) => (s.build && s.image ? [s.image] : [])));
    for (const [name, s] of services) {
      expect(s.image ?? '', name).not.toMatch(/auto-setup/);
      // Every pulled image pinned to a version, never latest or untagged.
      if (s.image && !builtHere.has(s.image)) expect(s.image, name).toMatch(/:v?\d+(\.\d+)*(-[\w.-]+)?$/);
      else expect(s.build ?? s.image, `${name} has an image or a build`).toBeDefined();
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

  it('retries a failed one-shot job (restart: on-failure) and never restarts a finished one', () => {
    for (const [name, s] of services.filter(([, s]) => isJob(s))) expect(s.restart, name).toBe('on-failure');
  });

  it('probes health endpoints, never /metrics: the worker its /readyz, the API its /healthz', () => {
    for (const [name, s] of services) {
      expect([s.healthcheck?.test ?? []].flat().join(' '), name).not.toMatch(/\/metrics\b/);
    }
    expect(service('worker').healthcheck!.test).toContain('http://127.0.0.1:9464/readyz');
    expect(service('api').healthcheck!.test).toContain('http://127.0.0.1:3000/healthz');
    // The worker's metrics port in the probe is the one the worker listens on (WORKER_METRICS_PORT's default).
    expect(loadConfig({}).ports.workerMetrics).toBe(9464);
  });

  it('ships a .env.example naming every variable compose requires, with no secret filled in', () => {
    const example = read('.env.example');
    const required = [...read('docker-compose.yml').matchAll(/\$\{(\w+):\?/g)].map((m) => m[1]!);
    expect(required.length).toBeGreaterThan(0);
    for (const name of new Set(required)) {
      // Present, and empty: a published value would be a published secret (compose then names the empty one).
      expect(example, name).toMatch(new RegExp(`^${name}=$`, 'm'));
    }
    expect(example).toContain('openssl rand -hex 32');
    expect(example).toContain('api-key.js create');
    expect(read('.gitignore').split('\n')).toContain('.env');
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
    // The schema job's plugin is only a name for the SQL tool; the server runs the project's driver.
    expect(schema.environment!.DB).toBe('postgres12');
    expect(server.environment!.DB).toBe(TEMPORAL_PERSISTENCE.plugin);
    // The same pools as the server the project runs (the image's own defaults are 20 and 10 per
    // service: up to 120 connections, past Postgres's default max_connections of 100).
    expect(server.environment).toMatchObject({
      SQL_MAX_CONNS: String(TEMPORAL_PERSISTENCE.default.maxConns),
      SQL_MAX_IDLE_CONNS: String(TEMPORAL_PERSISTENCE.default.maxIdleConns),
      SQL_VIS_MAX_CONNS: String(TEMPORAL_PERSISTENCE.visibility.maxConns),
      SQL_VIS_MAX_IDLE_CONNS: String(TEMPORAL_PERSISTENCE.visibility.maxIdleConns),
    });
    for (const s of [schema, server]) {
      const env = s.environment!;
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
    // The one dynamic config: the file the Postgres-backed test and dev server copies (temporal-server.ts).
    expect(path.resolve(root, mount![0]!)).toBe(TEMPORAL_DYNAMIC_CONFIG_FILE);

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
    }
    // The sandbox is the image's `sandbox` stage: the product image does not carry dev/.
    expect(service('sandbox').build).toEqual({ context: '.', target: 'sandbox' });
    expect(service('sandbox').image).not.toBe(service('migrate').image);
    // One product image, built once (by `migrate`) and reused by the worker and the API, which
    // never pull it and run its compiled JavaScript (no tsx in the product image).
    expect(service('migrate').build).toBe('.');
    expect(service('migrate').image).toMatch(/^onceflow:/);
    for (const name of ['migrate', 'worker', 'api']) {
      if (name !== 'migrate') expect(service(name).build, name).toBeUndefined();
      expect(service(name).image, name).toBe(service('migrate').image);
      expect(service(name).pull_policy, name).toBe('never');
      const command = [service(name).command].flat();
      expect(command[0], name).toBe('node');
      expect(command[1], name).toMatch(/^dist\/app\/.*\.js$/);
      expect(
        fs.existsSync(
          path.join(
            root,
            String(command[1])
              .replace(/^dist\/app\//, '')
              .replace(/\.js$/, '.ts'),
          ),
        ),
        name,
      ).toBe(true);
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
    expect(env.WEBHOOK_SECRET).toMatch(/^\$\{WEBHOOK_SECRET:\?/);
    expect(env.ONCEFLOW_ADMIN_TOKEN).toMatch(/^\$\{ONCEFLOW_ADMIN_TOKEN:\?/);
    expect(env.API_KEY_SECRET).toMatch(/^\$\{API_KEY_SECRET:\?/);
    const config = composeConfig();
    expect(() => requireCredentials(config, ['adminToken', 'webhookSecret', 'apiKeySecret'])).not.toThrow();

    // Ports: what each process listens on is what compose publishes and health-checks.
    const targets = (s: Service) => (s.ports ?? []).map((e) => portBinding(e, nothingSet).target);
    expect(targets(service('api'))).toContain(String(config.ports.api));
    expect(targets(service('sandbox'))).toContain(String(config.ports.sandbox));
    // Prometheus scrapes workers on the compose network; the host needs no port of theirs.
    expect(service('worker').ports).toBeUndefined();
    expect(service('worker').expose).toEqual([String(config.ports.workerMetrics)]);
    expect([service('worker').healthcheck!.test].flat().join(' ')).toContain(
      `:${config.ports.workerMetrics}/readyz`,
    );
    expect([service('api').healthcheck!.test].flat().join(' ')).toContain(`:${config.ports.api}/healthz`);
    expect([service('sandbox').healthcheck!.test].flat().join(' ')).toContain(
      `:${config.ports.sandbox}/healthz`,
    );
  });

  it('builds the workflow bundle once, in the image, after the code it bundles', () => {
    const dockerfile = read('Dockerfile').split('\n');
    // From the compiled workflows: the files the image's workers hash to find it.
    const build = dockerfile.findIndex((l) =>
      /^RUN node dist\/app\/src\/cli\/build-workflow-bundle\.js/.test(l),
    );
    expect(build, 'Dockerfile builds the bundle').toBeGreaterThan(0);
    const compile = dockerfile.findIndex((l) => /^RUN npm run build:app/.test(l));
    expect(compile, 'Dockerfile compiles before bundling').toBeGreaterThan(0);
    expect(compile).toBeLessThan(build);
    for (const dir of ['src', 'workflows', 'activities']) {
      const copy = dockerfile.findIndex((l) => new RegExp(`^COPY ${dir} `).test(l));
      expect(copy, `COPY ${dir}`).toBeGreaterThan(0);
      expect(copy, `COPY ${dir} before the bundle`).toBeLessThan(build);
    }
    // Workers in compose find it themselves (by hash), so none overrides the path.
    expect(compose['x-onceflow-env'].WORKFLOW_BUNDLE_PATH).toBeUndefined();
  });
});

/**
 * Only the API's port may leave the machine, and only when the user says so. Every other service
 * (Postgres with its published password, Temporal's frontend with no auth, the UI, the sandbox and its
 * `/_sandbox/reset`, Prometheus, Grafana) is reachable from the host's loopback at most, whatever the
 * environment says. `expose:` publishes nothing (it only names a port on the compose network);
 * `network_mode: host` would bypass every binding, so no service may use it.
 */
describe('docker-compose.yml publishes nothing beyond loopback but the API, and the API only on request', () => {
  it('reads port entries and host addresses the way compose and Docker do', () => {
    const hostIp = (entry: unknown) => portBinding(entry, nothingSet).hostIp;
    expect(hostIp('5432:5432')).toBe('');
    expect(hostIp('9464')).toBe('');
    expect(hostIp(9464)).toBe('');
    expect(hostIp('127.0.0.1:5432:5432')).toBe('127.0.0.1');
    expect(hostIp('127.0.0.1:5432:5432/tcp')).toBe('127.0.0.1');
    expect(hostIp('[::1]:5432:5432')).toBe('::1');
    expect(hostIp({ target: 5432, published: '5432' })).toBe('');
    expect(hostIp({ target: 5432, published: '5432', host_ip: '127.0.0.1' })).toBe('127.0.0.1');
    // A default is what `docker compose up` uses; a variable without one is empty: every interface.
    expect(hostIp('${H:-127.0.0.1}:3000:3000')).toBe('127.0.0.1');
    expect(hostIp('${H-127.0.0.1}:3000:3000')).toBe('127.0.0.1');
    expect(hostIp('${H:-${G:-127.0.0.1}}:3000:3000')).toBe('127.0.0.1');
    expect(hostIp('${H}:3000:3000')).toBe('');
    expect(hostIp('$H:3000:3000')).toBe('');
    expect(hostIp('${H:+127.0.0.1}:3000:3000')).toBe('');
    expect(hostIp('$${H}:3000:3000')).toBe('${H}');
    expect(() => hostIp('${H:?set H}:3000:3000')).toThrow(/has no default/);
    expect(portBinding('${H:-127.0.0.1}:3000:3000', everythingPublic).hostIp).toBe('0.0.0.0');
    expect(portBinding('127.0.0.1:${P:-5432}:5432', everythingPublic).hostIp).toBe('127.0.0.1');

    for (const ip of ['127.0.0.1', '127.3.2.1', '::1', '0:0:0:0:0:0:0:1']) {
      expect(isLoopbackIp(ip), ip).toBe(true);
    }
    for (const ip of ['', '0.0.0.0', '::', '10.0.0.7', '192.168.1.2', 'localhost', '128.0.0.1', '::2']) {
      expect(isLoopbackIp(ip), ip).toBe(false);
    }
  });

  it('the check flags each way a port can leave loopback, and lets only the API port be the user’s choice', () => {
    const doc = parseYaml(`
      services:
        api:
          ports:
            - '\${API_PUBLISH_HOST:-127.0.0.1}:3000:3000'  # allowed: loopback unless the user opts in
            - '9100:9100'                                  # the API's other ports are not the API port
        api2: { ports: ['\${API_PUBLISH_HOST}:3000:3000'] }   # no default
        pg: { ports: ['127.0.0.1:5432:5432', '5433:5432', '[::1]:5434:5432'] }
        ui: { ports: ['\${UI_HOST:-127.0.0.1}:8080:8080'] }    # loopback by default, but a knob
        job: { ports: ['\${JOB_HOST:?set it}:1:1'] }
        long: { ports: [{ target: 1, published: 1 }, { target: 2, published: 2, host_ip: '127.0.0.1' }] }
        random: { ports: [9464] }
        internal: { expose: ['9464'] }
        hostnet: { network_mode: host }
        joined: { networks: [hn] }
      networks:
        hn: { name: host, external: true }
    `) as Compose;
    expect(portsBeyondLoopback(doc, 3000)).toEqual([
      'api: ports "9100:9100" is published on every interface by default',
      'api2: ports "${API_PUBLISH_HOST}:3000:3000" is published on every interface by default',
      'pg: ports "5433:5432" is published on every interface by default',
      'ui: ports "${UI_HOST:-127.0.0.1}:8080:8080" can be published on 0.0.0.0 from the environment',
      'job: ports "${JOB_HOST:?set it}:1:1": ${JOB_HOST} is required: it has no default',
      'long: ports {"target":1,"published":1} is published on every interface by default',
      'random: ports 9464 is published on every interface by default',
    ]);
    expect(onHostNetwork(doc)).toEqual(['hostnet', 'joined']);
  });

  it('binds every published port of every service to loopback, except that the API port is the user’s choice', () => {
    expect(portsBeyondLoopback(compose, composeConfig().ports.api)).toEqual([]);
  });

  it('publishes the API port on loopback unless the user sets the documented variable', () => {
    const apiPort = String(composeConfig().ports.api);
    const api = (service('api').ports ?? []).filter((e) => portBinding(e, nothingSet).target === apiPort);
    expect(api).toHaveLength(1);
    expect(portBinding(api[0], nothingSet).hostIp).toBe('127.0.0.1');
    const optIn = (name: string) => (name === API_PUBLISH_VARIABLE ? '0.0.0.0' : undefined);
    expect(portBinding(api[0], optIn).hostIp).toBe('0.0.0.0');
    expect(read('docs/DEPLOYING.md')).toContain(`${API_PUBLISH_VARIABLE}=0.0.0.0`);
  });

  it('runs no service on the host network, where its own bind address would be the host’s', () => {
    expect(onHostNetwork(compose)).toEqual([]);
  });
});
