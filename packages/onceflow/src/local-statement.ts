/**
 * The contract between a local-mode body written as SQL and Ledger.runLocalStatement, which runs
 * ONE autocommitted statement:
 *
 *     with ledger_wait as materialized (...),   -- the ledger's: sets lock_timeout to localWaitMs
 *          <the body's CTEs>,                    -- the caller's business write
 *          ledger_record as (insert into operations ... select ... from ledger_result ...)
 *     select result from ledger_record
 *
 * What the body must provide:
 * - `ctes`: CTEs without the leading `with`, separated by commas;
 * - among them `ledger_result` (LOCAL_STATEMENT.result), exactly once: a
 *   `select` whose one column is named `result` (json). Its one row is
 *   stored as the operation's result; no row means there is nothing to do
 *   (nothing is stored, and the CTEs must have written nothing);
 * - every CTE that can wait on a lock must reference `ledger_wait` (or a CTE that does) before it
 *   waits, e.g. `where exists (select from ledger_wait) and ...`, so the wait bound is in force;
 * - parameters `$1..$n`, all used: the ledger's follow, so `$n+1` would silently read them;
 * - no CTE of its own named `ledger_*` other than `ledger_result`;
 * - `name`, 1-50 of [a-z0-9_], one per text: it is prepared as `ledger_stmt_<name>`.
 *
 * `new LocalStatement(body)` checks this by reading the text (not parsing it) and throws
 * LedgerError('invalid_input'); Postgres reports the rest on the first run.
 */
import { LedgerError } from './errors.ts';
import { localStatementText } from './sql.ts';

/** The names a body shares with the ledger's part of the statement. */
export const LOCAL_STATEMENT = {
  /** Defined by the ledger, first: referencing it bounds a CTE's lock wait by localWaitMs. */
  wait: 'ledger_wait',
  /** Defined by the body: the query whose one row is the stored result. */
  result: 'ledger_result',
  /** The one column of `result`. */
  resultColumn: 'result',
} as const;

/** What the caller writes: the input of `new LocalStatement`. */
export interface LocalStatementBody {
  /** 1-50 of [a-z0-9_]; one name per distinct `ctes` text (it names the prepared statement). */
  name: string;
  /** The body's CTEs, without the leading `with` (see the contract above). */
  ctes: string;
  /** `$1..$n` of `ctes`, in order. */
  values: readonly unknown[];
}

/** The checked shape of one name's text: whatever the values, the same statement. */
interface Checked {
  ctes: string;
  params: number;
  text: string;
}

/**
 * Every name checked in this process: a body built per call is checked once, and a name reused for
 * another text (which node-postgres would refuse) is caught where it is built.
 */
const checkedByName = new Map<string, Checked>();

const NAME = /^[a-z0-9_]{1,50}$/;
/** A CTE definition: `name [(columns)] as [not] [materialized] (`. */
const CTE_DEFINITION =
  /\b([a-z_][a-z0-9_]*)\s*(?:\(([^()]*)\))?\s+as\s*(?:not\s+materialized\s*|materialized\s*)?\(/gi;
/** Something that can wait on a row lock: a data-modifying statement or a locking read. */
const LOCKING = /\b(?:insert|update|delete|merge)\b|\bfor\s+(?:no\s+key\s+)?(?:update|share|key\s+share)\b/i;

function invalid(name: string, problem: string): LedgerError {
  return new LedgerError('invalid_input', `local statement "${name}": ${problem}`);
}

/**
 * The SQL with comments and the contents of quoted literals and identifiers
 * blanked (same length, so positions still match), so a `$3` or
 * `ledger_result` inside a string or a comment is not taken for one.
 */
function code(sqlText: string): string {
  return sqlText.replace(/--[^\n]*|\/\*[\s\S]*?\*\/|'(?:[^']|'')*'|"(?:[^"]|"")*"/g, (m) =>
    m.startsWith("'") || m.startsWith('"')
      ? `${m[0]}${' '.repeat(m.length - 2)}${m[0]}`
      : ' '.repeat(m.length),
  );
}

/** The text of the parenthesised group that opens at `open` (a `(`), without its parentheses. */
function group(text: string, open: number): string | null {
  let depth = 0;
  for (let i = open; i < text.length; i++) {
    if (text[i] === '(') depth++;
    else if (text[i] === ')' && --depth === 0) return text.slice(open + 1, i);
  }
  return null;
}

function check(body: LocalStatementBody): Checked {
  const { name, ctes, values } = body;
  if (typeof name !== 'string' || !NAME.test(name))
    throw new LedgerError('invalid_input', 'a local statement name is 1-50 of [a-z0-9_]');
  if (typeof ctes !== 'string' || ctes.trim() === '') throw invalid(name, 'ctes is empty');
  if (!Array.isArray(values)) throw invalid(name, 'values must be an array');
  const text = code(ctes);
  if (/^\s*with\b/i.test(text)) throw invalid(name, 'ctes start without `with`: the ledger writes it');

  // The CTEs in order, each with its query (nested definitions stay inside their parent's).
  const defined: { cte: string; columns: string[] | null; query: string }[] = [];
  const definition = new RegExp(CTE_DEFINITION.source, 'gi');
  for (let m = definition.exec(text); m; m = definition.exec(text)) {
    const open = m.index + m[0].length - 1;
    const query = group(text, open);
    if (query === null) throw invalid(name, `the parentheses of ${m[1]} do not close`);
    const columns = m[2]?.split(',').map((c) => c.trim().toLowerCase()) ?? null;
    defined.push({ cte: m[1]!.toLowerCase(), columns, query });
    definition.lastIndex = open + query.length + 2;
  }

  const results = defined.filter((d) => d.cte.startsWith('ledger_'));
  for (const { cte } of results) {
    if (cte !== LOCAL_STATEMENT.result)
      throw invalid(name, `${cte} is the ledger's name; a body defines only ${LOCAL_STATEMENT.result}`);
  }
  if (results.length === 0) throw invalid(name, `ctes must define ${LOCAL_STATEMENT.result}`);
  if (results.length > 1) throw invalid(name, `${LOCAL_STATEMENT.result} is defined twice`);
  const result = results[0]!;
  if (!/^\s*select\b/i.test(result.query))
    throw invalid(name, `${LOCAL_STATEMENT.result} must be a select (the body's writes go in other CTEs)`);
  const namesResult = result.columns
    ? result.columns.length === 1 && result.columns[0] === LOCAL_STATEMENT.resultColumn
    : new RegExp(`\\bas\\s+${LOCAL_STATEMENT.resultColumn}\\b`, 'i').test(result.query);
  if (!namesResult)
    throw invalid(name, `${LOCAL_STATEMENT.result} must name its one column ${LOCAL_STATEMENT.resultColumn}`);

  // Bounded: references ledger_wait or a bounded CTE. That the reference is evaluated before the
  // first lock wait (WHERE, not RETURNING) is the author's part: the check reads names only.
  const bounded = new Set<string>([LOCAL_STATEMENT.wait]);
  for (const { cte, query } of defined) {
    if ([...bounded].some((b) => new RegExp(`\\b${b}\\b`, 'i').test(query))) bounded.add(cte);
    else if (LOCKING.test(query))
      throw invalid(
        name,
        `${cte} writes or locks rows but references neither ${LOCAL_STATEMENT.wait} nor a CTE that does: ` +
          'its lock waits would be unbounded',
      );
  }

  const used = new Set([...text.matchAll(/\$(\d+)/g)].map((m) => Number(m[1])));
  for (const n of used) {
    if (n < 1 || n > values.length)
      throw invalid(
        name,
        `$${n} has no value (${values.length} given); past $${values.length} are the ledger's`,
      );
  }
  for (let n = 1; n <= values.length; n++) {
    if (!used.has(n)) throw invalid(name, `$${n} is given a value but never used`);
  }
  return { ctes, params: values.length, text: localStatementText(ctes, values.length) };
}

/**
 * A checked local-mode body (see the contract above): the only thing
 * Ledger.runLocalStatement runs. Build it per call with that call's values;
 * a name is checked in full the first time it is built.
 */
export class LocalStatement {
  /** Prepared on each connection as `ledger_stmt_<name>`. */
  readonly name: string;
  readonly values: readonly unknown[];
  /** The whole statement the ledger sends: the body between the ledger's parts. */
  readonly text: string;
  /** Makes the type nominal: an object literal with the same fields is not a LocalStatement. */
  readonly #checked = true;

  constructor(body: LocalStatementBody) {
    const known = typeof body?.name === 'string' ? checkedByName.get(body.name) : undefined;
    let shape: Checked;
    if (known && known.ctes === body.ctes) {
      if (!Array.isArray(body.values) || body.values.length !== known.params)
        throw invalid(body.name, `it takes ${known.params} values, got ${String(body.values?.length)}`);
      shape = known;
    } else {
      if (known)
        throw invalid(body.name, 'the name is already used for another text (one name, one statement)');
      shape = check(body);
      checkedByName.set(body.name, shape);
    }
    this.name = body.name;
    this.values = body.values;
    this.text = shape.text;
  }

  /** True for a body built by this class (and so checked). */
  static isChecked(value: unknown): value is LocalStatement {
    return typeof value === 'object' && value !== null && #checked in value;
  }
}
