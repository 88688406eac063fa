/**
 * The `Prefer` request header (RFC 7240): a preference is a hint, so one we cannot parse is ignored,
 * never an error.
 *
 *   Prefer     = 1#preference
 *   preference = token [ BWS "=" BWS word ] *( OWS ";" [ OWS parameter ] )
 *   parameter  = token [ BWS "=" BWS word ]
 *   word       = token / quoted-string
 *
 * Several `Prefer` fields are one list (Node joins them with ", "). Names are
 * case-insensitive; when a preference appears more than once, only the first
 * counts (§2). A malformed list element is skipped on its own, so
 * `Prefer: garbage", wait=5` still waits: the rest of the list was written
 * by the same client and is well-formed.
 */

/** The longest wait the API grants (the GET long-poll's maximum too). */
export const MAX_PREFER_WAIT_SECONDS = 30;

const TCHAR = /[!#$%&'*+\-.^_`|~0-9A-Za-z]/;
const WS = /[ \t]/;

/** Each preference's lowercased name and value, first occurrence only; parameters are parsed and dropped. */
export function parsePrefer(header: string | string[] | undefined): Map<string, string> {
  const out = new Map<string, string>();
  if (header === undefined) return out;
  const s = Array.isArray(header) ? header.join(', ') : header;
  let i = 0;
  const skipWs = () => {
    while (i < s.length && WS.test(s[i]!)) i++;
  };
  const token = (): string | null => {
    const start = i;
    while (i < s.length && TCHAR.test(s[i]!)) i++;
    return i > start ? s.slice(start, i) : null;
  };
  const quoted = (): string | null => {
    if (s[i] !== '"') return null;
    let value = '';
    for (i++; i < s.length; i++) {
      const c = s[i]!;
      if (c === '"') {
        i++;
        return value;
      }
      if (c === '\\') {
        i++;
        if (i >= s.length) return null;
        value += s[i];
      } else {
        value += c;
      }
    }
    return null; // unterminated
  };
  /** `token [ BWS "=" BWS word ]`: the name and value, or null if malformed. */
  const pair = (): [string, string] | null => {
    const name = token();
    if (name === null) return null;
    const save = i;
    skipWs();
    if (s[i] !== '=') {
      i = save;
      return [name, ''];
    }
    i++;
    skipWs();
    const value = s[i] === '"' ? quoted() : token();
    return value === null ? null : [name, value];
  };
  /** One list element, up to (not including) its comma; null if malformed. */
  const element = (): [string, string] | null => {
    skipWs();
    const pref = pair();
    if (pref === null) return null;
    for (;;) {
      skipWs();
      if (i >= s.length || s[i] === ',') return pref;
      if (s[i] !== ';') return null;
      i++;
      skipWs();
      // `;` with no parameter after it is allowed ("[ OWS parameter ]").
      if (i >= s.length || s[i] === ',' || s[i] === ';') continue;
      if (pair() === null) return null;
    }
  };
  /** After a malformed element: on to the next comma outside a quoted string. */
  const skipElement = () => {
    while (i < s.length && s[i] !== ',') {
      if (s[i] === '"') {
        if (quoted() === null) i = s.length;
      } else {
        i++;
      }
    }
  };
  while (i < s.length) {
    const start = i;
    const pref = element();
    if (pref === null) {
      i = start;
      skipElement();
    } else {
      const name = pref[0].toLowerCase();
      if (!out.has(name)) out.set(name, pref[1]);
    }
    i++; // the comma (or past the end)
  }
  return out;
}

/** The preferred wait in whole seconds, clamped; undefined when there is no usable `wait`. */
export function preferredWaitSeconds(header: string | string[] | undefined): number | undefined {
  const raw = parsePrefer(header).get('wait');
  if (raw === undefined || !/^[0-9]+$/.test(raw)) return undefined;
  // Clamped rather than refused: a preference is a hint (RFC 7240 §2), and Preference-Applied says what was used.
  return Math.min(MAX_PREFER_WAIT_SECONDS, Number(raw));
}
