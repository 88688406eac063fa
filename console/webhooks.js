// The Webhooks page of the operator console, over src/operator/webhook-routes.ts: every tenant's
// endpoints, their deliveries (by status), one delivery's attempts, and redelivery of one delivery
// or of every failed one, always previewed first and confirmed with a reason (audited per delivery).
// app.js hands in the helpers it shares (no import back, so no cycle). Every value from the server
// is written with textContent, never as HTML.

const STATUSES = ['pending', 'succeeded', 'failed'];

/**
 * @param h the console's helpers: el, api, render, listTable, errorLine, age, q
 */
export function webhooksPage(h) {
  const { el, api, render, listTable, errorLine, age, q } = h;
  // A 401 has already taken the page back to sign-in: nothing more to draw.
  const signedOut = (err) => err?.status === 401;

  const status = el(
    'select',
    { id: 'w-status', name: 'status' },
    el('option', { value: '' }, 'any'),
    ...STATUSES.map((s) => el('option', { value: s }, s)),
  );
  const tenant = el('input', { id: 'w-tenant', name: 'tenant', autocomplete: 'off' });
  const endpoint = el('select', { id: 'w-endpoint', name: 'endpoint' }, el('option', { value: '' }, 'any'));
  const updated = el('p', { class: 'muted', role: 'status' }, 'Loading…');
  const endpoints = listTable("Every tenant's endpoints, oldest first (secrets are never shown)", [
    'Endpoint',
    'Tenant',
    'URL',
    'Events',
    'Created',
  ]);
  const deliveries = listTable('Deliveries, newest first: one per endpoint and event', [
    'Event',
    'Type',
    'Tenant',
    'URL',
    'Status',
    'Attempts',
    'Last answer',
    'Redeliveries',
    'Age',
    'Actions',
  ]);
  endpoints.table.classList.add('endpoints');
  deliveries.table.classList.add('deliveries');
  // Outside the tables, so a reload that redraws them leaves an action in progress alone.
  const panel = el('section', { id: 'webhook-panel', 'aria-live': 'polite' });

  const lastAnswer = (d) =>
    d.lastStatus !== null && d.lastStatus !== undefined ? `HTTP ${d.lastStatus}` : (d.lastError ?? '—');

  const drawEndpoints = (rows) => {
    const t = tenant.value.trim();
    const shown = rows.filter((e) => !t || e.tenantId === t);
    endpoints.body.replaceChildren(
      ...(shown.length === 0
        ? [el('tr', {}, el('td', { colspan: 5 }, 'No webhook endpoint.'))]
        : shown.map((e) =>
            el(
              'tr',
              { 'data-endpoint-id': e.id },
              el('td', { class: 'key' }, e.id),
              el('td', {}, e.tenantId),
              el('td', { class: 'key' }, e.url),
              el('td', {}, e.events.join(', ')),
              el('td', {}, age(e.createdAt)),
            ),
          )),
    );
    const keep = endpoint.value;
    endpoint.replaceChildren(
      el('option', { value: '' }, 'any'),
      ...rows.map((e) => el('option', { value: e.id }, `${e.id} (${e.tenantId}, ${e.url})`)),
    );
    endpoint.value = rows.some((e) => e.id === keep) ? keep : '';
  };

  const drawDeliveries = (rows) => {
    deliveries.body.replaceChildren(
      ...(rows.length === 0
        ? [el('tr', {}, el('td', { colspan: 10 }, 'No delivery matches.'))]
        : rows.map((d) =>
            el(
              'tr',
              { 'data-event-id': d.eventId, 'data-endpoint-id': d.endpointId, class: `delivery-${d.status}` },
              el('td', { class: 'key' }, d.eventId),
              el('td', {}, d.eventType),
              el('td', {}, d.tenantId),
              el('td', { class: 'key' }, d.url),
              el('td', { class: 'delivery-status' }, d.status),
              el('td', {}, String(d.attempts)),
              el('td', {}, lastAnswer(d)),
              el('td', {}, String(d.redeliveries)),
              el('td', {}, age(d.createdAt)),
              el(
                'td',
                { class: 'actions' },
                el(
                  'button',
                  {
                    type: 'button',
                    'aria-label': `Attempts of ${d.eventId} to ${d.endpointId}`,
                    onclick: () => void attemptsPanel(d),
                  },
                  'Attempts',
                ),
                ' ',
                el(
                  'button',
                  {
                    type: 'button',
                    'aria-label': `Redeliver ${d.eventId} to ${d.endpointId}`,
                    onclick: () =>
                      redeliverPanel(
                        { endpoint: d.endpointId, event: d.eventId },
                        `Redeliver ${d.eventId} to ${d.url}`,
                      ),
                  },
                  'Redeliver',
                ),
              ),
            ),
          )),
    );
  };

  const load = async () => {
    try {
      const [eps, ds] = await Promise.all([
        api('GET', '/admin/webhooks/endpoints'),
        api(
          'GET',
          `/admin/webhooks/deliveries${q({
            status: status.value,
            tenant: tenant.value.trim(),
            endpoint: endpoint.value,
            limit: 200,
          })}`,
        ),
      ]);
      drawEndpoints(eps.data);
      drawDeliveries(ds.data);
      updated.textContent =
        `${eps.data.length} endpoint(s), ${ds.data.length} deliver${ds.data.length === 1 ? 'y' : 'ies'} ` +
        `shown; updated ${new Date().toLocaleTimeString()}`;
    } catch (err) {
      if (!signedOut(err)) updated.replaceChildren(errorLine(err));
    }
  };

  /** One delivery with every attempt: status, latency, response excerpt. */
  async function attemptsPanel(d) {
    const title = el('h2', { tabindex: '-1' }, `Delivery of ${d.eventId}`);
    panel.replaceChildren(title, el('p', { role: 'status' }, 'Loading…'));
    title.focus();
    let found;
    try {
      found = await api('GET', `/admin/webhooks/delivery${q({ endpoint: d.endpointId, event: d.eventId })}`);
    } catch (err) {
      if (!signedOut(err)) panel.replaceChildren(title, errorLine(err));
      return;
    }
    const x = found.delivery;
    const attempts = listTable('Every attempt of this delivery, first first', [
      'Attempt',
      'Started',
      'Status',
      'Latency',
      'Error',
      'Response excerpt',
    ]);
    attempts.table.classList.add('attempts');
    attempts.body.replaceChildren(
      ...(found.attempts.length === 0
        ? [el('tr', {}, el('td', { colspan: 6 }, 'No attempt yet.'))]
        : found.attempts.map((a) =>
            el(
              'tr',
              { 'data-attempt': a.attempt },
              el('td', {}, String(a.attempt)),
              el('td', {}, new Date(a.startedAt).toLocaleString()),
              el('td', {}, a.statusCode === null ? '— (no answer)' : String(a.statusCode)),
              el('td', {}, `${a.latencyMs} ms`),
              el('td', {}, a.error ?? ''),
              el('td', { class: 'key' }, a.responseExcerpt ?? ''),
            ),
          )),
    );
    panel.replaceChildren(
      title,
      el(
        'dl',
        {},
        el('dt', {}, 'Tenant'),
        el('dd', {}, x.tenantId),
        el('dt', {}, 'Event type'),
        el('dd', {}, x.eventType),
        el('dt', {}, 'Endpoint'),
        el('dd', { class: 'key' }, `${x.endpointId} (${x.url})`),
        el('dt', {}, 'Status'),
        el('dd', { id: 'webhook-delivery-status' }, x.status),
        el('dt', {}, 'Workflow'),
        el('dd', { class: 'key' }, x.workflowId),
        el('dt', {}, 'Created'),
        el('dd', {}, new Date(x.createdAt).toLocaleString()),
        el('dt', {}, 'Delivered'),
        el('dd', {}, x.deliveredAt ? new Date(x.deliveredAt).toLocaleString() : '—'),
      ),
      attempts.table,
      el(
        'p',
        {},
        el(
          'button',
          {
            type: 'button',
            onclick: () =>
              redeliverPanel(
                { endpoint: x.endpointId, event: x.eventId },
                `Redeliver ${x.eventId} to ${x.url}`,
              ),
          },
          'Redeliver this event',
        ),
      ),
    );
  }

  /**
   * Redelivery of `target` (one delivery, or `failed: true`): the preview of what will be sent and
   * to whom, then a required reason, then confirm; the audit IDs it wrote after.
   */
  async function redeliverPanel(target, heading) {
    const title = el('h2', { tabindex: '-1' }, heading);
    panel.replaceChildren(title, el('p', { role: 'status' }, 'Previewing…'));
    title.focus();
    let plan;
    try {
      plan = await api('POST', '/admin/webhooks/redeliver', { ...target, preview: true });
    } catch (err) {
      if (!signedOut(err)) panel.replaceChildren(title, errorLine(err));
      return;
    }
    const preview = listTable('What will be sent, and to whom', ['Tenant', 'Event type', 'Event', 'URL']);
    preview.table.classList.add('preview');
    preview.body.replaceChildren(
      ...(plan.deliveries.length === 0
        ? [el('tr', {}, el('td', { colspan: 4 }, 'Nothing to redeliver.'))]
        : plan.deliveries.map((d) =>
            el(
              'tr',
              { 'data-event-id': d.eventId, 'data-endpoint-id': d.endpointId },
              el('td', {}, d.tenantId),
              el('td', {}, d.eventType),
              el('td', { class: 'key' }, d.eventId),
              el('td', { class: 'key' }, d.url),
            ),
          )),
    );
    const reason = el('textarea', { id: 'webhook-redeliver-reason', rows: 2, required: true });
    const outcome = el('div', { 'aria-live': 'polite' });
    const confirm = el('button', { type: 'button', class: 'primary', disabled: true }, 'Confirm redelivery');
    const update = () => {
      confirm.disabled = plan.deliveries.length === 0 || reason.value.trim() === '';
    };
    reason.addEventListener('input', update);
    confirm.addEventListener('click', async () => {
      confirm.disabled = true;
      try {
        const done = await api('POST', '/admin/webhooks/redeliver', {
          ...target,
          preview: false,
          reason: reason.value.trim(),
        });
        reason.disabled = true;
        outcome.replaceChildren(
          el(
            'p',
            { class: 'ok', role: 'status' },
            `Redelivery started for ${done.deliveries.length} deliver${done.deliveries.length === 1 ? 'y' : 'ies'}; ` +
              `${done.auditIds.length} audit row(s) written.`,
          ),
          el(
            'ul',
            { class: 'redelivered' },
            ...done.deliveries.map((d, i) =>
              el(
                'li',
                { 'data-event-id': d.eventId, 'data-endpoint-id': d.endpointId },
                `${d.eventId} to ${d.url} (${d.tenantId}): workflow `,
                el('span', { class: 'key' }, d.workflowId ?? '—'),
                ', audit ',
                el('span', { class: 'audit-id' }, done.auditIds[i] ?? '—'),
              ),
            ),
          ),
        );
        void load();
      } catch (err) {
        if (signedOut(err)) return;
        outcome.replaceChildren(errorLine(err));
        update();
      }
    });
    panel.replaceChildren(
      title,
      el(
        'p',
        {},
        'Each event is sent again as it is now, with the same webhook-id: a receiver that dedupes on it ' +
          'processes it once. Nothing is sent until you confirm.',
      ),
      preview.table,
      el(
        'label',
        { for: 'webhook-redeliver-reason' },
        'Redelivery reason (required, recorded in the audit log)',
        reason,
      ),
      el('p', {}, confirm),
      outcome,
    );
  }

  const redeliverFailed = el('button', { type: 'button' }, 'Redeliver failed…');
  redeliverFailed.addEventListener('click', () => {
    const ep = endpoint.value;
    redeliverPanel(
      { failed: true, ...(ep ? { endpoint: ep } : {}) },
      ep ? `Redeliver every failed delivery to ${ep}` : 'Redeliver every failed delivery (all tenants)',
    );
  });
  for (const input of [status, tenant, endpoint]) input.addEventListener('change', load);

  render(
    el('h1', {}, 'Webhooks'),
    el(
      'form',
      {
        class: 'filters',
        'aria-label': 'Delivery filters',
        onsubmit: (e) => {
          e.preventDefault();
          void load();
        },
      },
      el('label', { for: 'w-status' }, 'Status', status),
      el('label', { for: 'w-tenant' }, 'Tenant', tenant),
      el('label', { for: 'w-endpoint' }, 'Endpoint', endpoint),
      el('button', { type: 'submit' }, 'Refresh'),
      redeliverFailed,
    ),
    updated,
    el('h2', {}, 'Endpoints'),
    endpoints.table,
    el('h2', {}, 'Deliveries'),
    deliveries.table,
    panel,
  );
  void load();
}
