// onceflow operator console: a page over the admin API (src/operator/routes.ts).
// Plain DOM, no framework, no inline script (the CSP allows only this file).
// Every value from the server is written with textContent, never as HTML.
// The operator's token stays in this tab's sessionStorage and goes out only as
// `Authorization: Bearer`, so no cookie exists for another site to ride on.

import { webhooksPage } from './webhooks.js';

const TOKEN = 'onceflow.console.token';
const REFRESH_MS = 10_000;
const main = document.getElementById('main');
const nav = document.getElementById('nav');
let timer;

/** el('p', { class: 'x' }, 'text', child): an element with attributes and children (strings become text). */
function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

function render(...nodes) {
  main.replaceChildren(...nodes);
  main.querySelector('h1')?.setAttribute('tabindex', '-1');
}

class ApiError extends Error {
  constructor(status, problem) {
    super(problem?.detail || problem?.title || `HTTP ${status}`);
    this.status = status;
    this.problem = problem;
  }
}

async function api(method, path, body) {
  const token = sessionStorage.getItem(TOKEN);
  const res = await fetch(path, {
    method,
    headers: {
      accept: 'application/json',
      ...(token ? { authorization: `Bearer ${token}` } : {}),
      ...(body ? { 'content-type': 'application/json' } : {}),
    },
    body: body ? JSON.stringify(body) : undefined,
    cache: 'no-store',
  });
  const data = res.status === 204 ? null : await res.json().catch(() => null);
  if (res.status === 401) {
    sessionStorage.removeItem(TOKEN);
    signIn(data?.detail ? `Signed out: ${data.detail}` : 'Signed out: the credential was refused.');
    throw new ApiError(401, data);
  }
  if (!res.ok) throw new ApiError(res.status, data);
  return data;
}

const q = (params) => {
  const s = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v) s.set(k, String(v));
  const text = s.toString();
  return text ? `?${text}` : '';
};
const enc = encodeURIComponent;
const age = (iso) => {
  const s = Math.max(0, Math.round((Date.now() - Date.parse(iso)) / 1000));
  if (s < 120) return `${s} s`;
  if (s < 7200) return `${Math.round(s / 60)} min`;
  return `${(s / 3600).toFixed(1)} h`;
};
const windowLeft = (ms) =>
  ms === null || ms === undefined ? 'no provider keys' : `${(ms / 3_600_000).toFixed(1)} h`;
const errorLine = (err) =>
  el('p', { class: 'error', role: 'alert' }, err instanceof Error ? err.message : String(err));

// ------------------------------------------------------------------ sign in

function signIn(message) {
  clearInterval(timer);
  nav.hidden = true;
  const input = el('input', {
    id: 'token',
    name: 'token',
    type: 'password',
    autocomplete: 'off',
    required: true,
    spellcheck: 'false',
  });
  const status = el('p', { role: 'status' }, message ?? '');
  const form = el(
    'form',
    {
      onsubmit: async (e) => {
        e.preventDefault();
        status.replaceChildren();
        sessionStorage.setItem(TOKEN, input.value.trim());
        try {
          await api('GET', '/admin/attention?limit=1');
          route();
        } catch (err) {
          // Whatever the refusal (401, throttled, down), the token is not kept.
          sessionStorage.removeItem(TOKEN);
          if (!(err instanceof ApiError && err.status === 401)) status.replaceChildren(errorLine(err));
        }
      },
    },
    el('label', { for: 'token' }, 'Operator token (from `onceflow ops operator add NAME`)'),
    input,
    el('p', {}, el('button', { type: 'submit', class: 'primary' }, 'Sign in')),
  );
  render(el('h1', {}, 'Sign in'), status, form);
}

// ---------------------------------------------------------------- attention

const REFUND_STEP = 'payment.refund';

/** A table with a caption and a header row; rows are drawn into the returned tbody. */
function listTable(caption, headings) {
  const body = el('tbody');
  const table = el(
    'table',
    {},
    el('caption', { class: 'muted' }, caption),
    el('thead', {}, el('tr', {}, ...headings.map((h) => el('th', { scope: 'col' }, h)))),
    body,
  );
  return { table, body };
}

const historyLink = (url) =>
  el('a', { href: url, target: '_blank', rel: 'noopener noreferrer' }, 'Temporal UI');

function attentionPage() {
  const tenant = el('input', { id: 'f-tenant', name: 'tenant', autocomplete: 'off' });
  const reason = el('select', { id: 'f-reason', name: 'reason' }, el('option', { value: '' }, 'any'));
  const updated = el('p', { class: 'muted', role: 'status' }, 'Loading…');
  const orders = listTable('Orders parked for an operator, oldest first', [
    'Order',
    'Tenant',
    'Status',
    'Reason',
    'Age',
    'Last error',
    'History',
  ]);
  const refunds = listTable(
    'Refunds waiting on an outcome (refund_unknown) or parked for an operator (needs_attention), oldest first',
    ['Refund', 'Order', 'Tenant', 'Status', 'Amount (minor units)', 'Age', 'Last error', 'History'],
  );
  // Outside the tables, so the refresh that redraws them leaves an action in progress alone.
  const panel = el('section', { id: 'refund-panel', 'aria-live': 'polite' });
  let items = [];
  let refundItems = [];
  // One reason filter over both lists: an order's reason, or a refund's status.
  const draw = () => {
    const [kind, value] = reason.value ? reason.value.split(/:(.*)/s) : ['', ''];
    const orderRows = items.filter((i) => !kind || (kind === 'order' && i.reason === value));
    const refundRows = refundItems.filter((r) => !kind || (kind === 'refund' && r.status === value));
    orders.body.replaceChildren(
      ...(orderRows.length === 0
        ? [el('tr', {}, el('td', { colspan: 7 }, 'No order needs attention.'))]
        : orderRows.map((i) =>
            el(
              'tr',
              {},
              el('td', {}, el('a', { href: `#/order/${enc(i.tenantId)}/${enc(i.orderId)}` }, i.orderId)),
              el('td', {}, i.tenantId),
              el('td', {}, i.status),
              el('td', {}, i.reason ?? ''),
              el('td', {}, age(i.updatedAt)),
              el('td', {}, i.lastError ?? ''),
              el('td', {}, historyLink(i.temporalUiUrl)),
            ),
          )),
    );
    refunds.body.replaceChildren(
      ...(refundRows.length === 0
        ? [el('tr', {}, el('td', { colspan: 8 }, 'No refund needs attention.'))]
        : refundRows.map((r) =>
            el(
              'tr',
              { 'data-refund-id': r.refundId },
              el(
                'td',
                {},
                el(
                  'button',
                  { type: 'button', class: 'link', onclick: () => refundPanel(panel, r) },
                  r.refundId,
                ),
              ),
              el('td', {}, el('a', { href: `#/order/${enc(r.tenantId)}/${enc(r.orderId)}` }, r.orderId)),
              el('td', {}, r.tenantId),
              el('td', {}, r.status),
              el('td', {}, `${r.amount} ${r.currency}`),
              el('td', {}, age(r.updatedAt)),
              el('td', {}, r.lastError ?? ''),
              el('td', {}, historyLink(r.temporalUiUrl)),
            ),
          )),
    );
  };
  const load = async () => {
    try {
      const res = await api('GET', `/admin/attention${q({ tenant: tenant.value.trim() })}`);
      items = res.data;
      refundItems = res.refunds ?? [];
      const orderReasons = [...new Set(items.map((i) => i.reason).filter(Boolean))].sort();
      const refundStatuses = [...new Set(refundItems.map((r) => r.status))].sort();
      const values = [...orderReasons.map((x) => `order:${x}`), ...refundStatuses.map((x) => `refund:${x}`)];
      const keep = reason.value;
      reason.replaceChildren(
        el('option', { value: '' }, 'any'),
        orderReasons.length
          ? el(
              'optgroup',
              { label: 'Orders' },
              ...orderReasons.map((x) => el('option', { value: `order:${x}` }, x)),
            )
          : null,
        refundStatuses.length
          ? el(
              'optgroup',
              { label: 'Refunds' },
              ...refundStatuses.map((x) => el('option', { value: `refund:${x}` }, `refund ${x}`)),
            )
          : null,
      );
      reason.value = values.includes(keep) ? keep : '';
      draw();
      updated.textContent =
        `${items.length} order(s), ${refundItems.length} refund(s); updated ${new Date().toLocaleTimeString()}, ` +
        `refreshes every ${REFRESH_MS / 1000} s` +
        (res.visibilityError ? ` (Temporal visibility unavailable: ${res.visibilityError})` : '');
    } catch (err) {
      if (!(err instanceof ApiError && err.status === 401)) updated.replaceChildren(errorLine(err));
    }
  };
  tenant.addEventListener('change', load);
  reason.addEventListener('change', draw);
  render(
    el('h1', {}, 'Attention'),
    el(
      'div',
      { class: 'filters' },
      el('label', { for: 'f-tenant' }, 'Tenant', tenant),
      el('label', { for: 'f-reason' }, 'Reason', reason),
    ),
    updated,
    el('h2', {}, 'Orders'),
    orders.table,
    el('h2', {}, 'Refunds'),
    refunds.table,
    panel,
  );
  void load();
  timer = setInterval(load, REFRESH_MS);
}

/**
 * What the provider said about a refund's downstream key, as GET /admin/operation reports it
 * (asked just now by the server): the ground the previews below stand on.
 */
function providerSays(story) {
  const p = story.provider;
  if (p.error) return { answer: 'error', text: `The provider could not be asked just now (${p.error}).` };
  if (p.found && p.object) {
    const ref = p.object.id ? ` ${p.object.id}` : '';
    const status = p.object.status ? `, ${p.object.status}` : '';
    return {
      answer: 'found',
      status: p.object.status,
      text: `The provider has a refund under this step's downstream key (${ref.trim()}${status}).`,
    };
  }
  return { answer: 'not_found', text: "The provider has no refund under this step's downstream key." };
}

/** Re-drive preview for a parked refund: what its workflow will do with the provider refund step. */
function refundRedriveEffect(story, says) {
  const state = story.record.state;
  if (state === 'succeeded' || state === 'failed') {
    return `The ledger already holds this refund's outcome (${state}): the workflow records it and goes on; nothing is sent to the provider.`;
  }
  if (says.answer === 'found') {
    return 'The workflow reconciles by the key, finds that refund and records it: no second refund is made.';
  }
  if (says.answer === 'not_found') {
    return (
      `The workflow reconciles by the key, then makes the refund under the same key (${story.downstreamKey}), so the ` +
      "provider deduplicates it. If the record is past the provider's key window it is not made again: the refund " +
      'parks again, to be resolved by hand.'
    );
  }
  return 'The workflow reconciles by the key again; if the provider still cannot be asked, the refund parks again.';
}

/** Why a resolve with this outcome would be refused, from the provider's answer; null when it stands. */
function resolveRefusal(says, outcome) {
  if (says.answer === 'not_found' && outcome === 'succeeded') {
    return 'The provider has no refund under this key: resolving it as succeeded will be refused.';
  }
  if (says.answer === 'found' && says.status && says.status !== outcome) {
    return `The provider reports this refund ${says.status}: resolving it as ${outcome} will be refused; reconcile instead.`;
  }
  return null;
}

/** The actions on one refund in the Attention list, each previewed and confirmed. */
async function refundPanel(panel, r) {
  const title = el('h2', { tabindex: '-1' }, `Refund ${r.refundId}`);
  panel.replaceChildren(title, el('p', { role: 'status' }, 'Loading…'));
  title.focus();
  const stepUrl = `/admin/operation${q({ tenant: r.tenantId, type: REFUND_STEP, key: r.operationKey })}`;
  let story;
  try {
    story = await api('GET', stepUrl);
  } catch (err) {
    if (!(err instanceof ApiError && err.status === 401)) panel.replaceChildren(title, errorLine(err));
    return;
  }
  const outcome = el('div', { 'aria-live': 'polite' });
  const says = providerSays(story);
  const rec = story.record;

  // Reconcile only asks the provider and records its answer, as on the order page: no confirmation.
  const reconcile = el('button', { type: 'button' }, 'Reconcile refund now');
  reconcile.addEventListener('click', async () => {
    reconcile.disabled = true;
    try {
      const x = await api('POST', '/admin/operations/reconcile', {
        tenant: r.tenantId,
        type: REFUND_STEP,
        key: r.operationKey,
      });
      await showOutcome(
        outcome,
        x.changed
          ? `Reconciled: ${x.before} → ${x.after}`
          : `Reconciled: still ${x.after}${x.error ? ` (${x.error})` : ''}`,
        x.auditId,
        r.workflowId,
      );
    } catch (err) {
      outcome.replaceChildren(errorLine(err));
    } finally {
      reconcile.disabled = false;
    }
  });

  // Resolve: the outcome and a required reason, what it will do, then confirm.
  const choice = el(
    'select',
    { id: 'refund-outcome' },
    el('option', { value: 'failed' }, 'failed'),
    el('option', { value: 'succeeded' }, 'succeeded'),
  );
  const resolveReason = el('textarea', { id: 'refund-resolve-reason', rows: 2, required: true });
  const resolvePreview = el('p', { role: 'status' });
  const resolveConfirm = el(
    'button',
    { type: 'button', class: 'primary', disabled: true },
    'Confirm refund resolve',
  );
  const describeResolve = () => {
    const refusal = resolveRefusal(says, choice.value);
    resolvePreview.textContent = refusal
      ? `${says.text} ${refusal}`
      : `${says.text} Resolving records the provider refund as ${choice.value} on your word and reason, and ` +
        'tells the refund workflow to go on from that outcome' +
        (choice.value === 'failed' ? ': the refunded amount is given back to the order.' : '.');
    resolveConfirm.disabled = refusal !== null || resolveReason.value.trim() === '';
  };
  choice.addEventListener('change', describeResolve);
  resolveReason.addEventListener('input', describeResolve);
  resolveConfirm.addEventListener('click', async () => {
    resolveConfirm.disabled = true;
    try {
      const x = await api('POST', '/admin/operations/resolve', {
        tenant: r.tenantId,
        type: REFUND_STEP,
        key: r.operationKey,
        outcome: choice.value,
        reason: resolveReason.value.trim(),
      });
      await showOutcome(outcome, `Refund resolved: ${x.before} → ${x.after}`, x.auditId, r.workflowId);
    } catch (err) {
      outcome.replaceChildren(errorLine(err));
      describeResolve();
    }
  });
  describeResolve();

  // Re-drive, for a parked refund: the preview first, then the reason, then confirm.
  let redriveBox = null;
  if (r.status === 'needs_attention') {
    const redriveReason = el('textarea', { id: 'refund-redrive-reason', rows: 2, required: true });
    const redrivePreview = el('div', { 'aria-live': 'polite' });
    const redriveConfirm = el(
      'button',
      { type: 'button', class: 'primary', disabled: true },
      'Confirm refund re-drive',
    );
    let previewed = false;
    const update = () => {
      redriveConfirm.disabled = !previewed || redriveReason.value.trim() === '';
    };
    const previewButton = el('button', { type: 'button' }, 'Preview refund re-drive');
    previewButton.addEventListener('click', async () => {
      try {
        // Asked again now: the provider's answer may have changed since the panel opened.
        const fresh = await api('GET', stepUrl);
        const now = providerSays(fresh);
        redrivePreview.replaceChildren(
          el('h4', {}, 'What the re-drive will do'),
          el(
            'ul',
            { class: 'preview' },
            el(
              'li',
              { 'data-step': 'refund' },
              el('strong', {}, 'refund: '),
              `Ledger: ${fresh.record.state}, ${fresh.record.attempts} attempt(s). ${now.text} `,
              refundRedriveEffect(fresh, now),
            ),
          ),
          el('p', {}, 'The refund receipt and status writes follow under their own keys, each once.'),
        );
        previewed = true;
      } catch (err) {
        redrivePreview.replaceChildren(errorLine(err));
      }
      update();
    });
    redriveReason.addEventListener('input', update);
    redriveConfirm.addEventListener('click', async () => {
      redriveConfirm.disabled = true;
      try {
        const x = await api('POST', `/admin/refunds/${enc(r.tenantId)}/${enc(r.refundId)}/redrive`, {
          reason: redriveReason.value.trim(),
        });
        await showOutcome(
          outcome,
          `Refund re-drive accepted; the workflow resumed (re-drive ${x.parkedAs.redrives})`,
          x.auditId,
          r.workflowId,
        );
      } catch (err) {
        outcome.replaceChildren(errorLine(err));
        update();
      }
    });
    redriveBox = el(
      'div',
      { class: 'panel' },
      el('h3', {}, 'Re-drive'),
      el('p', {}, 'A parked refund resumes where it stopped, its provider refund under its original key.'),
      previewButton,
      redrivePreview,
      el(
        'label',
        { for: 'refund-redrive-reason' },
        'Re-drive reason (required, recorded in the audit log)',
        redriveReason,
      ),
      redriveConfirm,
    );
  }

  panel.replaceChildren(
    title,
    el(
      'dl',
      {},
      el('dt', {}, 'Tenant'),
      el('dd', {}, r.tenantId),
      el('dt', {}, 'Order'),
      el('dd', {}, el('a', { href: `#/order/${enc(r.tenantId)}/${enc(r.orderId)}` }, r.orderId)),
      el('dt', {}, 'Status'),
      el('dd', { id: 'refund-status' }, r.status),
      el('dt', {}, 'Amount'),
      el('dd', {}, `${r.amount} ${r.currency} (minor units)`),
      el('dt', {}, 'Last error'),
      el('dd', {}, r.lastError ?? '—'),
      el('dt', {}, 'Provider refund step'),
      el('dd', { class: 'key' }, `${REFUND_STEP} ${r.operationKey}`),
      el('dt', {}, 'Ledger state'),
      el('dd', {}, `${rec.state}, ${rec.attempts} attempt(s)`),
      el('dt', {}, 'Downstream key'),
      el('dd', { class: 'key' }, story.downstreamKey ?? '—'),
      el('dt', {}, 'Provider'),
      el('dd', {}, says.text),
      el('dt', {}, 'Workflow'),
      el(
        'dd',
        {},
        el('a', { href: r.temporalUiUrl, target: '_blank', rel: 'noopener noreferrer' }, r.workflowId),
      ),
    ),
    outcome,
    el(
      'div',
      { class: 'panel' },
      el('h3', {}, 'Reconcile'),
      el('p', {}, 'Asks the provider by the downstream key and records its answer; it never makes a refund.'),
      reconcile,
    ),
    el(
      'div',
      { class: 'panel' },
      el('h3', {}, 'Resolve'),
      el('label', { for: 'refund-outcome' }, 'Refund outcome', choice),
      el(
        'label',
        { for: 'refund-resolve-reason' },
        'Resolve reason (required, recorded in the audit log)',
        resolveReason,
      ),
      resolvePreview,
      resolveConfirm,
    ),
    redriveBox,
  );
}

// -------------------------------------------------------------------- order

function auditTable(entries, caption) {
  return el(
    'table',
    { class: 'audit' },
    el('caption', { class: 'muted' }, caption),
    el(
      'thead',
      {},
      el(
        'tr',
        {},
        ...['ID', 'When', 'Actor', 'Credential', 'Action', 'Reason', 'Operation or workflow'].map((h) =>
          el('th', { scope: 'col' }, h),
        ),
      ),
    ),
    el(
      'tbody',
      {},
      entries.length === 0
        ? el('tr', {}, el('td', { colspan: 7 }, 'No audit entries.'))
        : entries.map((a) =>
            el(
              'tr',
              { 'data-audit-id': a.id },
              el('td', {}, a.id),
              el('td', {}, new Date(a.createdAt).toLocaleString()),
              el('td', {}, a.actor),
              el('td', {}, a.actorCredential),
              el('td', {}, a.action),
              el('td', {}, a.reason ?? ''),
              el('td', { class: 'key' }, a.operationKey ?? a.workflowId ?? ''),
            ),
          ),
    ),
  );
}

/** After an action: its result, and the audit row it wrote next to it. */
async function showOutcome(target, text, auditId, workflowId) {
  const entries = (await api('GET', `/admin/audit${q({ workflowId, limit: 50 })}`)).data;
  const row = entries.filter((a) => a.id === auditId);
  target.replaceChildren(
    el('p', { class: 'ok', role: 'status' }, `${text} (audit ${auditId})`),
    auditTable(row, 'The audit row it wrote'),
  );
}

function stepItem(view, step, actions) {
  return el(
    'li',
    { class: `state-${step.state}` },
    el('strong', {}, `${step.operationType} `),
    el('span', { class: 'key' }, step.key),
    el(
      'dl',
      {},
      el('dt', {}, 'State'),
      el('dd', {}, step.state),
      el('dt', {}, 'Attempts'),
      el('dd', {}, String(step.attempts)),
      el('dt', {}, 'Provider reference'),
      el('dd', {}, step.providerRef ?? '—'),
      el('dt', {}, 'Downstream key'),
      el('dd', { class: 'key' }, step.downstreamKey ?? '— (local step)'),
      el('dt', {}, 'Key window left'),
      el('dd', {}, step.downstreamKey ? windowLeft(step.keyWindowLeftMs) : '—'),
      el('dt', {}, 'Last error'),
      el('dd', {}, step.error ? JSON.stringify(step.error) : '—'),
      el('dt', {}, 'Created'),
      el('dd', {}, new Date(step.createdAt).toLocaleString()),
    ),
    step.state === 'unknown' ? actions(step) : null,
  );
}

async function orderPage(tenant, id) {
  render(el('h1', {}, `Order ${id}`), el('p', { role: 'status' }, 'Loading…'));
  let view;
  try {
    view = await api('GET', `/admin/orders/${enc(tenant)}/${enc(id)}`);
  } catch (err) {
    if (!(err instanceof ApiError && err.status === 401)) render(el('h1', {}, `Order ${id}`), errorLine(err));
    return;
  }
  const o = view.order;
  const outcome = el('div', { 'aria-live': 'polite' });

  const unknownActions = (step) => {
    const box = el('div', { class: 'panel' });
    const reasonId = `reason-${step.operationType}`;
    const outcomeId = `outcome-${step.operationType}`;
    const reason = el('textarea', { id: reasonId, rows: 2, required: true });
    const choice = el(
      'select',
      { id: outcomeId },
      el('option', { value: 'succeeded' }, 'succeeded'),
      el('option', { value: 'failed' }, 'failed'),
    );
    const preview = el('p', { role: 'status' });
    const confirm = el('button', { type: 'button', class: 'primary', disabled: true }, 'Confirm resolve');
    const describe = () => {
      preview.textContent =
        `Resolving records ${step.operationType} ${step.key} as ${choice.value} on your word and reason, and signals ` +
        `the order's workflow to go on from that outcome. If the provider can still be asked and says otherwise, ` +
        `the resolve is refused and nothing changes.`;
      confirm.disabled = reason.value.trim() === '';
    };
    choice.addEventListener('change', describe);
    reason.addEventListener('input', describe);
    confirm.addEventListener('click', async () => {
      confirm.disabled = true;
      try {
        const r = await api('POST', '/admin/operations/resolve', {
          tenant: o.tenantId,
          type: step.operationType,
          key: step.key,
          outcome: choice.value,
          reason: reason.value.trim(),
        });
        await showOutcome(outcome, `Resolved: ${r.before} → ${r.after}`, r.auditId, o.workflowId);
      } catch (err) {
        outcome.replaceChildren(errorLine(err));
        confirm.disabled = false;
      }
    });
    const reconcile = el('button', { type: 'button' }, 'Reconcile now');
    reconcile.addEventListener('click', async () => {
      reconcile.disabled = true;
      try {
        const r = await api('POST', '/admin/operations/reconcile', {
          tenant: o.tenantId,
          type: step.operationType,
          key: step.key,
        });
        await showOutcome(
          outcome,
          r.changed
            ? `Reconciled: ${r.before} → ${r.after}`
            : `Reconciled: still ${r.after}${r.error ? ` (${r.error})` : ''}`,
          r.auditId,
          o.workflowId,
        );
      } catch (err) {
        outcome.replaceChildren(errorLine(err));
      } finally {
        reconcile.disabled = false;
      }
    });
    describe();
    box.append(
      el('p', {}, 'This outcome is unknown. Ask the provider again, or resolve it with what you know.'),
      reconcile,
      el('h3', {}, 'Resolve'),
      el('label', { for: outcomeId }, 'Outcome', choice),
      el('label', { for: reasonId }, 'Reason (required, recorded in the audit log)', reason),
      preview,
      confirm,
    );
    return box;
  };

  // Re-drive: preview first, then confirm.
  const redriveBox = el('div', { class: 'panel' });
  const redriveReason = el('textarea', { id: 'redrive-reason', rows: 2, required: true });
  const previewList = el('div', { 'aria-live': 'polite' });
  const previewButton = el('button', { type: 'button' }, 'Preview re-drive');
  const redriveButton = el(
    'button',
    { type: 'button', class: 'primary', disabled: true },
    'Confirm re-drive',
  );
  let preview;
  const updateRedrive = () => {
    redriveButton.disabled = !preview?.allowed || redriveReason.value.trim() === '';
  };
  redriveReason.addEventListener('input', updateRedrive);
  previewButton.addEventListener('click', async () => {
    try {
      preview = await api('GET', `/admin/orders/${enc(o.tenantId)}/${enc(o.orderId)}/redrive-preview`);
      previewList.replaceChildren(
        el('h3', {}, 'What the re-drive will do'),
        el(
          'ul',
          { class: 'preview' },
          preview.steps.map((s) =>
            el(
              'li',
              { class: `effect-${s.effect}`, 'data-step': s.name },
              el('strong', {}, `${s.name}: `),
              s.explanation,
            ),
          ),
        ),
        preview.allowed
          ? el('p', {}, 'Status writes run again as new local writes (a new re-drive epoch).')
          : el('p', { class: 'error', role: 'alert' }, preview.refusal),
      );
    } catch (err) {
      previewList.replaceChildren(errorLine(err));
    }
    updateRedrive();
  });
  redriveButton.addEventListener('click', async () => {
    redriveButton.disabled = true;
    try {
      const r = await api('POST', `/admin/orders/${enc(o.tenantId)}/${enc(o.orderId)}/redrive`, {
        reason: redriveReason.value.trim(),
      });
      await showOutcome(
        outcome,
        `Re-drive accepted; the workflow resumed (re-drive ${r.parkedAs.redrives})`,
        r.auditId,
        o.workflowId,
      );
    } catch (err) {
      outcome.replaceChildren(errorLine(err));
      updateRedrive();
    }
  });
  redriveBox.append(
    el('h2', {}, 'Re-drive'),
    el('p', {}, 'A parked order resumes from where it stopped, every step under its original key.'),
    previewButton,
    previewList,
    el('label', { for: 'redrive-reason' }, 'Reason (required, recorded in the audit log)', redriveReason),
    redriveButton,
  );

  let audit = [];
  try {
    audit = (await api('GET', `/admin/audit${q({ workflowId: o.workflowId, limit: 50 })}`)).data;
  } catch {
    /* shown empty */
  }
  render(
    el('h1', {}, `Order ${o.orderId}`),
    el(
      'dl',
      {},
      el('dt', {}, 'Tenant'),
      el('dd', {}, o.tenantId),
      el('dt', {}, 'Status'),
      el('dd', { id: 'order-status' }, o.status),
      el('dt', {}, 'Reason'),
      el('dd', {}, o.reason ?? '—'),
      el('dt', {}, 'Last error'),
      el('dd', {}, o.lastError ?? '—'),
      el('dt', {}, 'Amount'),
      el('dd', {}, `${o.amount} ${o.currency} (minor units)`),
      el('dt', {}, 'Workflow'),
      el(
        'dd',
        {},
        el('a', { href: view.temporalUiUrl, target: '_blank', rel: 'noopener noreferrer' }, o.workflowId),
      ),
    ),
    el('p', {}, el('button', { type: 'button', onclick: () => orderPage(tenant, id) }, 'Reload')),
    outcome,
    o.status === 'needs_attention' ? redriveBox : null,
    el('h2', {}, 'Steps'),
    el(
      'ol',
      { class: 'timeline' },
      view.steps.map((s) => stepItem(view, s, unknownActions)),
    ),
    el('h2', {}, 'Audit'),
    auditTable(audit, 'Operator actions on this order, newest first'),
  );
}

// -------------------------------------------------------------------- audit

const AUDIT_ACTIONS = [
  'reconcile',
  'resolve',
  'redrive',
  'redrive_requested',
  'redrive_refused',
  'redrive_unknown',
  'restore',
  'webhook_redeliver',
];

/** The audit log, filtered by the server (GET /admin/audit's query parameters). */
function auditPage() {
  const field = (id, label, input) => el('label', { for: id }, label, input);
  const tenant = el('input', { id: 'a-tenant', autocomplete: 'off' });
  const actor = el('input', { id: 'a-actor', autocomplete: 'off' });
  const action = el(
    'select',
    { id: 'a-action' },
    el('option', { value: '' }, 'any'),
    ...AUDIT_ACTIONS.map((a) => el('option', { value: a }, a)),
  );
  const text = el('input', { id: 'a-text', type: 'search', autocomplete: 'off' });
  const workflow = el('input', { id: 'a-workflow', autocomplete: 'off' });
  const holder = el('div', {}, el('p', { role: 'status' }, 'Loading…'));
  const load = async () => {
    try {
      const res = await api(
        'GET',
        `/admin/audit${q({
          tenant: tenant.value.trim(),
          actor: actor.value.trim(),
          action: action.value,
          q: text.value.trim(),
          workflowId: workflow.value.trim(),
          limit: 200,
        })}`,
      );
      holder.replaceChildren(
        el(
          'p',
          { class: 'muted', role: 'status' },
          `${res.data.length} entr${res.data.length === 1 ? 'y' : 'ies'}`,
        ),
        auditTable(res.data, 'The audit log, newest first; the actor comes from the credential'),
      );
    } catch (err) {
      if (!(err instanceof ApiError && err.status === 401)) holder.replaceChildren(errorLine(err));
    }
  };
  for (const input of [tenant, actor, action, text, workflow]) input.addEventListener('change', load);
  render(
    el('h1', {}, 'Audit'),
    el(
      'form',
      {
        class: 'filters',
        'aria-label': 'Audit filters',
        onsubmit: (e) => {
          e.preventDefault();
          void load();
        },
      },
      field('a-tenant', 'Tenant', tenant),
      field('a-actor', 'Actor', actor),
      field('a-action', 'Action', action),
      field('a-text', 'Reason, key or workflow contains', text),
      field('a-workflow', 'Workflow ID', workflow),
      el('button', { type: 'submit' }, 'Filter'),
    ),
    holder,
  );
  void load();
}

// ------------------------------------------------------------------- routing

function route() {
  clearInterval(timer);
  if (!sessionStorage.getItem(TOKEN)) return signIn();
  nav.hidden = false;
  const hash = location.hash || '#/attention';
  for (const a of nav.querySelectorAll('a')) {
    if (hash.startsWith(a.getAttribute('href'))) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  const order = /^#\/order\/([^/]+)\/([^/]+)$/.exec(hash);
  if (order) return orderPage(decodeURIComponent(order[1]), decodeURIComponent(order[2]));
  if (hash.startsWith('#/audit')) return auditPage();
  if (hash.startsWith('#/webhooks')) {
    return webhooksPage({ el, api, render, listTable, errorLine, age, q });
  }
  return attentionPage();
}

document.getElementById('sign-out').addEventListener('click', () => {
  sessionStorage.removeItem(TOKEN);
  signIn('Signed out.');
});
window.addEventListener('hashchange', route);
route();
