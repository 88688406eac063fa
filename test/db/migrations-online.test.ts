/**
 * Online-safe migrations (migrations/README.md, docs/UPGRADING.md): every
 * file not on the grandfathered list (0001-0014, applied history) is read,
 * `.sql` and `.js` alike, and refused if it uses a form that blocks a table
 * with rows for longer than a catalog change. The checker is shown refusing
 * 0007's index and 0009's CHECKed column, each locking form, and a
 * deliberately locking next migration dropped into a copy of the folder;
 * and accepting the safe forms. The README's recipe for CREATE INDEX
 * CONCURRENTLY (a .js migration with pgm.noTransaction()) is run through
 * the real runner.
 */
import { mkdir, mkdtemp, readdir, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { runner } from 'node-pg-migrate';
import { describe, expect, it } from 'vitest';
import { MIGRATIONS_DIR } from '../../src/db/migrate.ts';
import { ownDatabase } from '../support/env.ts';

/**
 * Applied history, exempt by number: these files ran before the rule (0007 and 0009 would not
 * pass it). Every other file, whatever its number (a next one, or one filling the gap at 0008),
 * is checked. Never add a number here: change the migration instead.
 */
const GRANDFATHERED = new Set([1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13, 14]);

/** The SQL without comments, string literals or dollar-quoted bodies, split into statements. */
function statements(sql: string): string[] {
  // One left-to-right pass, so whichever starts first wins: an apostrophe inside a comment
  // ("the order's row") must not open a string that swallows the statements after it, and a
  // `--` inside a string must not start a comment.
  const text = sql.replace(/\$([A-Za-z_]*)\$[\s\S]*?\$\1\$|'(?:[^']|'')*'|--[^\n]*|\/\*[\s\S]*?\*\//g, (m) =>
    m.startsWith('--') || m.startsWith('/*') ? ' ' : "''",
  );
  return text
    .split(';')
    .map((s) => s.replace(/\s+/g, ' ').trim())
    .filter((s) => s.length > 0);
}

const ident = String.raw`(?:"[^"]+"|[A-Za-z_][\w$]*)(?:\.(?:"[^"]+"|[A-Za-z_][\w$]*))?`;
const unquote = (name: string) =>
  name
    .replace(/"/g, '')
    .replace(/^public\./i, '')
    .toLowerCase();
const VOLATILE_DEFAULT =
  /\bDEFAULT\s+(?:now|clock_timestamp|statement_timestamp|timeofday|random|gen_random_uuid|uuid_generate_v\d\w*|nextval)\s*\(|\bDEFAULT\s+CURRENT_TIMESTAMP\b|\b(?:SMALL|BIG)?SERIAL\b|\bGENERATED\s+ALWAYS\s+AS\s*\(.*\)\s*STORED/i;

/**
 * The locking forms in one migration file, as messages (empty: online-safe).
 * `earlier` is the text of the files before it (for SET NOT NULL, which is
 * safe only after a validated CHECK (c IS NOT NULL) in an earlier file).
 */
export function lockingForms(sql: string, earlier = '', opts: { transaction?: boolean } = {}): string[] {
  const transaction = opts.transaction ?? true;
  const problems: string[] = [];
  const stmts = statements(sql);
  const created = new Set<string>();
  const notValid = new Set<string>();
  let lockTimeout = false;
  let touchesExisting = false;
  const existing = (table: string) => !created.has(unquote(table));

  for (const s of stmts) {
    const create = new RegExp(
      String.raw`^CREATE (?:UNLOGGED )?TABLE (?:IF NOT EXISTS )?(${ident})`,
      'i',
    ).exec(s);
    if (create) {
      created.add(unquote(create[1]!));
      continue;
    }
    if (/^SET (?:LOCAL )?lock_timeout\b/i.test(s)) {
      if (!transaction && /^SET LOCAL\b/i.test(s))
        problems.push(
          `SET LOCAL outside a transaction (pgm.noTransaction()) sets nothing; use SET lock_timeout: ${s}`,
        );
      else lockTimeout = true;
      continue;
    }
    const index = new RegExp(
      String.raw`^CREATE (?:UNIQUE )?INDEX (CONCURRENTLY )?(?:IF NOT EXISTS )?(?:${ident} )?ON (?:ONLY )?(${ident})`,
      'i',
    ).exec(s);
    if (index) {
      if (!existing(index[2]!)) continue;
      touchesExisting = true;
      if (!index[1])
        problems.push(
          `CREATE INDEX on an existing table blocks its writes for the whole build; use CREATE INDEX CONCURRENTLY: ${s}`,
        );
      else if (transaction)
        problems.push(
          `CREATE INDEX CONCURRENTLY cannot run inside a transaction (a .sql file is one): use a .js migration with pgm.noTransaction(): ${s}`,
        );
      continue;
    }
    if (/^(?:VACUUM FULL|CLUSTER|LOCK TABLE|REINDEX)\b/i.test(s) || /^VACUUM \(.*\bFULL\b/i.test(s)) {
      problems.push(`a table-locking maintenance command does not belong in a migration: ${s}`);
      continue;
    }
    const alter = new RegExp(String.raw`^ALTER TABLE (?:IF EXISTS )?(?:ONLY )?(${ident}) (.*)$`, 'i').exec(s);
    if (!alter) {
      if (/^(?:DROP (?:INDEX|TRIGGER)|CREATE (?:OR REPLACE )?TRIGGER)\b/i.test(s)) touchesExisting = true;
      continue;
    }
    if (!existing(alter[1]!)) continue;
    touchesExisting = true;
    // Sub-commands are comma-separated, but CHECK (...) may hold commas: split at depth 0.
    const actions: string[] = [];
    let depth = 0;
    let current = '';
    for (const ch of alter[2]!) {
      if (ch === '(') depth++;
      if (ch === ')') depth--;
      if (ch === ',' && depth === 0) {
        actions.push(current.trim());
        current = '';
      } else current += ch;
    }
    actions.push(current.trim());
    for (const a of actions) {
      if (/^ADD (?:COLUMN )?(?!CONSTRAINT\b|CHECK\b|FOREIGN\b|PRIMARY\b|UNIQUE\b|EXCLUDE\b)/i.test(a)) {
        if (/\bCHECK\s*\(|\bREFERENCES\b/i.test(a))
          problems.push(
            `ADD COLUMN with an inline CHECK/REFERENCES validates under ACCESS EXCLUSIVE; add the column, then ADD CONSTRAINT ... NOT VALID: ${a}`,
          );
        if (VOLATILE_DEFAULT.test(a))
          problems.push(
            `ADD COLUMN with a volatile default (or serial, or a stored generated column) rewrites the table: ${a}`,
          );
        if (/\b(?:PRIMARY KEY|UNIQUE)\b/i.test(a))
          problems.push(`ADD COLUMN ... UNIQUE/PRIMARY KEY builds an index under ACCESS EXCLUSIVE: ${a}`);
        continue;
      }
      const constraint = new RegExp(
        String.raw`^ADD (?:CONSTRAINT (${ident}) )?(CHECK|FOREIGN KEY|PRIMARY KEY|UNIQUE|EXCLUDE)\b`,
        'i',
      ).exec(a);
      if (constraint) {
        const kind = constraint[2]!.toUpperCase();
        if ((kind === 'CHECK' || kind === 'FOREIGN KEY') && !/\bNOT VALID\s*$/i.test(a))
          problems.push(`ADD CONSTRAINT ... ${kind} without NOT VALID scans the table under its lock: ${a}`);
        if ((kind === 'PRIMARY KEY' || kind === 'UNIQUE') && !/\bUSING INDEX\b/i.test(a))
          problems.push(
            `ADD ${kind} builds its index under ACCESS EXCLUSIVE; CREATE UNIQUE INDEX CONCURRENTLY, then ADD CONSTRAINT ... USING INDEX: ${a}`,
          );
        if (kind === 'EXCLUDE') problems.push(`ADD EXCLUDE builds its index under ACCESS EXCLUSIVE: ${a}`);
        if (constraint[1]) notValid.add(unquote(constraint[1]));
        continue;
      }
      const validate = new RegExp(String.raw`^VALIDATE CONSTRAINT (${ident})`, 'i').exec(a);
      if (validate && notValid.has(unquote(validate[1]!))) {
        problems.push(
          `VALIDATE CONSTRAINT in the file that added it holds ADD CONSTRAINT's ACCESS EXCLUSIVE lock through the scan; validate in a later file: ${a}`,
        );
        continue;
      }
      if (/^ALTER (?:COLUMN )?\S+ (?:SET DATA )?TYPE\b/i.test(a)) {
        problems.push(
          `ALTER COLUMN ... TYPE rewrites the table (most type changes) under ACCESS EXCLUSIVE: ${a}`,
        );
        continue;
      }
      const setNotNull = /^ALTER (?:COLUMN )?("?[\w$]+"?) SET NOT NULL\b/i.exec(a);
      if (setNotNull) {
        const col = setNotNull[1]!.replace(/"/g, '');
        const checked = new RegExp(String.raw`CHECK\s*\(\s*"?${col}"?\s+IS\s+NOT\s+NULL\s*\)`, 'i').test(
          earlier,
        );
        if (!checked || !/VALIDATE CONSTRAINT/i.test(earlier))
          problems.push(
            `SET NOT NULL scans the table under ACCESS EXCLUSIVE unless a CHECK (${col} IS NOT NULL) was validated in an earlier file: ${a}`,
          );
        continue;
      }
      if (/^SET (?:TABLESPACE|LOGGED|UNLOGGED|WITHOUT OIDS)\b/i.test(a) || /^(?:CLUSTER ON)\b/i.test(a))
        problems.push(`${a} rewrites the table: ${a}`);
    }
  }
  if (touchesExisting && !lockTimeout)
    problems.push("a file that locks an existing table must SET LOCAL lock_timeout first (e.g. '5s')");
  return problems;
}

interface MigrationFile {
  name: string;
  number: number;
  text: string;
}

async function migrationFiles(dir = MIGRATIONS_DIR): Promise<MigrationFile[]> {
  const names = (await readdir(dir)).filter((n) => /^\d{4}_.*\.(?:sql|ts|js)$/.test(n)).sort();
  return Promise.all(
    names.map(async (name) => ({
      name,
      number: Number(name.slice(0, 4)),
      text: await readFile(path.join(dir, name), 'utf8'),
    })),
  );
}

/**
 * A JavaScript migration's statements, as SQL the checker reads: each `pgm.sql('...')` argument
 * (a literal: an interpolated one cannot be checked). Any other builder call (pgm.createIndex,
 * pgm.addColumn, ...) is refused: its SQL is decided by node-pg-migrate, out of this check's
 * sight, so the README's recipe writes every statement with pgm.sql.
 */
function javascriptMigration(text: string): { sql: string; transaction: boolean; problems: string[] } {
  const code = text.replace(/^\s*\/\/[^\n]*$/gm, '').replace(/\/\*[\s\S]*?\*\//g, '');
  const problems: string[] = [];
  const sql: string[] = [];
  for (const m of code.matchAll(/\bpgm\.(\w+)\s*\(/g)) {
    if (m[1] === 'noTransaction') continue;
    if (m[1] !== 'sql') {
      problems.push(`pgm.${m[1]}(...) is not checked for locks: write the statement with pgm.sql`);
      continue;
    }
    const arg = /^\s*(`(?:[^`\\]|\\.)*`|'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")\s*,?\s*\)/.exec(
      code.slice(m.index + m[0].length),
    );
    if (!arg || arg[1]!.includes('${')) {
      problems.push('pgm.sql takes one string literal here (no interpolation), so it can be checked');
      continue;
    }
    sql.push(arg[1]!.slice(1, -1));
  }
  return { sql: sql.join(';\n'), transaction: !/\bpgm\.noTransaction\s*\(\s*\)/.test(code), problems };
}

/** The locking forms of one file, given the files before it. */
function fileProblems(file: MigrationFile, earlier: MigrationFile[]): string[] {
  const before = earlier.map((f) => f.text).join('\n');
  if (file.name.endsWith('.sql')) return lockingForms(file.text, before);
  if (file.name.endsWith('.js')) {
    const js = javascriptMigration(file.text);
    return [...js.problems, ...lockingForms(js.sql, before, { transaction: js.transaction })];
  }
  return [`${file.name}: the production image runs migrations with plain Node; write .sql or .js`];
}

/** Every checked file of a migrations folder with its problems (none: online-safe). */
async function checkFolder(dir = MIGRATIONS_DIR): Promise<Record<string, string[]>> {
  const files = await migrationFiles(dir);
  return Object.fromEntries(
    files
      .filter((f) => !GRANDFATHERED.has(f.number))
      .map((f) => [
        f.name,
        fileProblems(
          f,
          files.filter((e) => e.name < f.name),
        ),
      ]),
  );
}

describe('every migration not grandfathered is online-safe', async () => {
  const files = await migrationFiles();
  const checked = files.filter((f) => !GRANDFATHERED.has(f.number));

  it('checks the .sql and the .js files after 0014, and the grandfathered numbers all exist', () => {
    expect(checked.map((f) => f.name)).toEqual(
      expect.arrayContaining(['0019_orders_merchant_reference_idx.js']),
    );
    expect(checked.every((f) => f.number > 14)).toBe(true);
    const numbers = new Set(files.map((f) => f.number));
    expect([...GRANDFATHERED].filter((n) => !numbers.has(n))).toEqual([]);
  });

  it.each(checked.map((f) => [f.name, f] as const))('%s uses no locking form', (_name, file) => {
    expect(
      fileProblems(
        file,
        files.filter((f) => f.name < file.name),
      ),
    ).toEqual([]);
  });
});

describe('a deliberately locking next migration fails the check', () => {
  it('flags the new files by name, and only them', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'onceflow-locking-'));
    try {
      const files = (await readdir(MIGRATIONS_DIR)).filter((n) => /^\d{4}_.*\.(?:sql|js)$/.test(n));
      for (const f of files) await symlink(path.join(MIGRATIONS_DIR, f), path.join(dir, f));
      const last = Math.max(...files.map((f) => Number(f.slice(0, 4))));
      const next = (n: number) => String(last + n).padStart(4, '0');
      // A plain index build and a volatile default on orders, as a hurried release might write them.
      await writeFile(
        path.join(dir, `${next(1)}_orders_customer_idx.sql`),
        `-- Why: a deliberate example.\nSET LOCAL lock_timeout = '5s';\nCREATE INDEX orders_customer_idx ON orders (tenant_id, customer_id);\nALTER TABLE orders ADD COLUMN seen_at timestamptz DEFAULT now();\n`,
      );
      // The README's .js shape, but without pgm.noTransaction() and with a type change.
      await writeFile(
        path.join(dir, `${next(2)}_orders_amount.js`),
        `export function up(pgm) {\n  pgm.sql("SET lock_timeout = '5s'");\n  pgm.sql('CREATE INDEX CONCURRENTLY orders_x_idx ON orders (x)');\n  pgm.sql('ALTER TABLE orders ALTER COLUMN amount TYPE numeric');\n  pgm.addColumn('orders', { y: 'text' });\n}\n`,
      );
      const found = Object.entries(await checkFolder(dir)).filter(([, problems]) => problems.length > 0);
      expect(found.map(([name]) => name)).toEqual([
        `${next(1)}_orders_customer_idx.sql`,
        `${next(2)}_orders_amount.js`,
      ]);
      const [sqlProblems, jsProblems] = found.map(([, problems]) => problems.join('\n'));
      expect(sqlProblems).toMatch(/CREATE INDEX on an existing table blocks its writes/);
      expect(sqlProblems).toMatch(/volatile default/);
      expect(jsProblems).toMatch(/cannot run inside a transaction.*pgm\.noTransaction/);
      expect(jsProblems).toMatch(/TYPE rewrites/);
      expect(jsProblems).toMatch(/pgm\.addColumn\(\.\.\.\) is not checked/);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('refuses SET LOCAL lock_timeout in a migration outside a transaction', () => {
    const js = javascriptMigration(
      `export function up(pgm) { pgm.noTransaction(); pgm.sql("SET LOCAL lock_timeout = '5s'"); pgm.sql('CREATE INDEX CONCURRENTLY i ON orders (x)'); }`,
    );
    expect(js.transaction).toBe(false);
    expect(lockingForms(js.sql, '', { transaction: false }).join('\n')).toMatch(
      /SET LOCAL outside a transaction/,
    );
  });
});

describe('the checker', () => {
  const read = (name: string) => readFile(path.join(MIGRATIONS_DIR, name), 'utf8');

  it("refuses 0007's plain CREATE INDEX on an existing table", async () => {
    const problems = lockingForms(await read('0007_outbox_relay_all_queues.sql'));
    expect(problems.join('\n')).toMatch(/CREATE INDEX on an existing table blocks its writes/);
    expect(problems.join('\n')).toMatch(/lock_timeout/);
  });

  it("refuses 0009's column with an inline CHECK", async () => {
    const problems = lockingForms(await read('0009_order_reason.sql'));
    expect(problems.join('\n')).toMatch(/ADD COLUMN with an inline CHECK/);
  });

  const timeout = "SET LOCAL lock_timeout = '5s';\n";
  it.each([
    [
      'CREATE INDEX CONCURRENTLY in a .sql file',
      'CREATE INDEX CONCURRENTLY o_idx ON orders (x);',
      /cannot run inside a transaction/,
    ],
    [
      'a CHECK constraint without NOT VALID',
      'ALTER TABLE orders ADD CONSTRAINT c CHECK (amount > 0);',
      /without NOT VALID/,
    ],
    [
      'a foreign key without NOT VALID',
      'ALTER TABLE orders ADD CONSTRAINT f FOREIGN KEY (t) REFERENCES tenants (id);',
      /without NOT VALID/,
    ],
    [
      'VALIDATE in the same file',
      'ALTER TABLE orders ADD CONSTRAINT c CHECK (a > 0) NOT VALID;\nALTER TABLE orders VALIDATE CONSTRAINT c;',
      /later file/,
    ],
    [
      'a volatile default',
      'ALTER TABLE orders ADD COLUMN seen_at timestamptz DEFAULT now();',
      /volatile default/,
    ],
    ['a serial column', 'ALTER TABLE orders ADD COLUMN n bigserial;', /volatile default/],
    ['a type change', 'ALTER TABLE orders ALTER COLUMN amount TYPE numeric;', /TYPE rewrites/],
    [
      'SET NOT NULL without a validated check',
      'ALTER TABLE orders ALTER COLUMN reason SET NOT NULL;',
      /SET NOT NULL scans/,
    ],
    ['ADD UNIQUE', 'ALTER TABLE orders ADD CONSTRAINT u UNIQUE (workflow_id);', /USING INDEX/],
    ['VACUUM FULL', 'VACUUM FULL orders;', /maintenance command/],
  ])('refuses %s', (_name, sql, message) => {
    expect(lockingForms(timeout + sql).join('\n')).toMatch(message);
  });

  it('refuses any change to an existing table without lock_timeout', () => {
    expect(lockingForms('ALTER TABLE orders ADD COLUMN note text;')).toEqual([
      "a file that locks an existing table must SET LOCAL lock_timeout first (e.g. '5s')",
    ]);
  });

  it('reads an apostrophe in a comment as a comment, not as the start of a string', () => {
    // Before the one-pass scan, "order's" opened a string literal up to the next quote and
    // the locking statement inside it went unseen.
    const sql =
      "SET LOCAL lock_timeout = '5s';\n-- the order's total\nALTER TABLE orders ALTER COLUMN amount TYPE numeric;\n-- it's done\n";
    expect(lockingForms(sql).join('\n')).toMatch(/rewrites the table/);
    // ...and a `--` inside a string literal is not a comment.
    expect(lockingForms("SET LOCAL lock_timeout = '5s';\nCOMMENT ON TABLE orders IS 'a -- b';")).toEqual([]);
  });

  it.each([
    [
      'a new table with its index and checks',
      'CREATE TABLE t (id int CHECK (id > 0));\nCREATE INDEX t_idx ON t (id);\nALTER TABLE t ADD CONSTRAINT c CHECK (id < 10);',
    ],
    ['a nullable column', `${timeout}ALTER TABLE orders ADD COLUMN note text;`],
    ['a constant default', `${timeout}ALTER TABLE orders ADD COLUMN flag boolean NOT NULL DEFAULT false;`],
    [
      'a CHECK added NOT VALID',
      `${timeout}ALTER TABLE orders ADD CONSTRAINT c CHECK (amount > 0) NOT VALID;`,
    ],
    [
      'a multi-action ALTER with commas inside CHECK',
      `${timeout}ALTER TABLE a DROP CONSTRAINT c, ADD CONSTRAINT c CHECK (x IN ('a', 'b')) NOT VALID;`,
    ],
    [
      'VALIDATE of a constraint added by an earlier file',
      `${timeout}ALTER TABLE orders VALIDATE CONSTRAINT c;`,
    ],
    ['UNIQUE USING INDEX', `${timeout}ALTER TABLE orders ADD CONSTRAINT u UNIQUE USING INDEX u_idx;`],
  ])('accepts %s', (_name, sql) => {
    expect(lockingForms(sql)).toEqual([]);
  });

  it('accepts SET NOT NULL after an earlier file validated CHECK (c IS NOT NULL)', () => {
    const earlier =
      'ALTER TABLE orders ADD CONSTRAINT r CHECK (reason IS NOT NULL) NOT VALID;\n-- next file\nALTER TABLE orders VALIDATE CONSTRAINT r;';
    expect(lockingForms(`${timeout}ALTER TABLE orders ALTER COLUMN reason SET NOT NULL;`, earlier)).toEqual(
      [],
    );
  });
});

describe("README's recipe: CREATE INDEX CONCURRENTLY in a .js migration", () => {
  it('runs through the real runner outside a transaction and leaves a valid index', async () => {
    const db = await ownDatabase('concurrently');
    const dir = await mkdtemp(path.join(os.tmpdir(), 'onceflow-migrations-'));
    try {
      await mkdir(dir, { recursive: true });
      // The applied history (as links, .js migrations included) plus one new file in the README's shape.
      for (const f of (await readdir(MIGRATIONS_DIR)).filter((n) => /^\d{4}_.*\.(?:sql|js)$/.test(n)))
        await symlink(path.join(MIGRATIONS_DIR, f), path.join(dir, f));
      await writeFile(
        path.join(dir, '9999_concurrent_index.js'),
        `export function up(pgm) {
           pgm.noTransaction();
           pgm.sql("SET lock_timeout = '5s'");
           pgm.sql('DROP INDEX CONCURRENTLY IF EXISTS orders_test_concurrent_idx');
           pgm.sql('CREATE INDEX CONCURRENTLY orders_test_concurrent_idx ON orders (tenant_id, customer_id)');
           pgm.sql('RESET lock_timeout');
         }\n`,
      );
      const applied = await runner({
        databaseUrl: db.url,
        dir,
        direction: 'up',
        migrationsTable: 'pgmigrations',
        checkOrder: true,
        log: () => undefined,
      });
      expect(applied.map((m) => m.name)).toEqual(['9999_concurrent_index']);
      const client = new pg.Client({ connectionString: db.url });
      await client.connect();
      try {
        const { rows } = await client.query(
          `select i.indisvalid from pg_index i join pg_class c on c.oid = i.indexrelid
            where c.relname = 'orders_test_concurrent_idx'`,
        );
        expect(rows).toEqual([{ indisvalid: true }]);
      } finally {
        await client.end();
      }
    } finally {
      await rm(dir, { recursive: true, force: true });
      await db.drop();
    }
  }, 60_000);
});
