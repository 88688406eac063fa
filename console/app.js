// onceflow operator console: a page over the admin API (src/ops/routes.ts).
// Plain DOM, no framework, no inline script (the CSP allows only this file).
// Every value from the server is written with textContent, never as HTML.
// The operator's token stays in this tab's sessionStorage and goes out only as
// `Authorization: Bearer`, so no cookie exists for another site to ride on.

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

function attentionPage() {
  const tenant = el('input', { id: 'f-tenant', name: 'tenant', autocomplete: 'off' });
  const reason = el('select', { id: 'f-reason', name: 'reason' }, el('option', { value: '' }, 'any'));
  const updated = el('p', { class: 'muted', role: 'status' }, 'Loading…');
  const body = el('tbody');
  const table = el(
    'table',
    {},
    el('caption', { class: 'muted' }, 'Orders parked for an operator, oldest first'),
    el(
      'thead',
      {},
      el(
        'tr',
        {},
        ...['Order', 'Tenant', 'Status', 'Reason', 'Age', 'Last error', 'History'].map((h) =>
          el('th', { scope: 'col' }, h),
        ),
      ),
    ),
    body,
  );
  let items = [];
  const draw = () => {
    const r = reason.value;
    const rows = items.filter((i) => !r || i.reason === r);
    body.replaceChildren(
      ...(rows.length === 0
        ? [el('tr', {}, el('td', { colspan: 7 }, 'Nothing needs attention.'))]
        : rows.map((i) =>
            el(
              'tr',
              {},
              el('td', {}, el('a', { href: `#/order/${enc(i.tenantId)}/${enc(i.orderId)}` }, i.orderId)),
              el('td', {}, i.tenantId),
              el('td', {}, i.status),
              el('td', {}, i.reason ?? ''),
              el('td', {}, age(i.updatedAt)),
              el('td', {}, i.lastError ?? ''),
              el(
                'td',
                {},
                el(
                  'a',
                  { href: i.temporalUiUrl, target: '_blank', rel: 'noopener noreferrer' },
                  'Temporal UI',
                ),
              ),
            ),
          )),
    );
  };
  const load = async () => {
    try {
      const res = await api('GET', `/admin/attention${q({ tenant: tenant.value.trim() })}`);
      items = res.data;
      const reasons = [...new Set(items.map((i) => i.reason).filter(Boolean))].sort();
      const keep = reason.value;
      reason.replaceChildren(
        el('option', { value: '' }, 'any'),
        ...reasons.map((x) => el('option', { value: x }, x)),
      );
      reason.value = reasons.includes(keep) ? keep : '';
      draw();
      updated.textContent =
        `${items.length} order(s); updated ${new Date().toLocaleTimeString()}, refreshes every ${REFRESH_MS / 1000} s` +
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
    table,
  );
  void load();
  timer = setInterval(load, REFRESH_MS);
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

function auditPage() {
  const tenant = el('input', { id: 'a-tenant', autocomplete: 'off' });
  const workflow = el('input', { id: 'a-workflow', autocomplete: 'off' });
  const holder = el('div', {}, el('p', { role: 'status' }, 'Loading…'));
  const load = async () => {
    try {
      const res = await api(
        'GET',
        `/admin/audit${q({ tenant: tenant.value.trim(), workflowId: workflow.value.trim(), limit: 200 })}`,
      );
      holder.replaceChildren(
        auditTable(res.data, 'The audit log, newest first; the actor comes from the credential'),
      );
    } catch (err) {
      if (!(err instanceof ApiError && err.status === 401)) holder.replaceChildren(errorLine(err));
    }
  };
  tenant.addEventListener('change', load);
  workflow.addEventListener('change', load);
  render(
    el('h1', {}, 'Audit'),
    el(
      'div',
      { class: 'filters' },
      el('label', { for: 'a-tenant' }, 'Tenant', tenant),
      el('label', { for: 'a-workflow' }, 'Workflow ID', workflow),
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
  return attentionPage();
}

document.getElementById('sign-out').addEventListener('click', () => {
  sessionStorage.removeItem(TOKEN);
  signIn('Signed out.');
});
window.addEventListener('hashchange', route);
route();
