// Tern's dashboard: plain browser JavaScript over ternd's JSON API, no build step.
// The token lives in sessionStorage only (gone when the tab closes) and travels as the
// API's bearer header. Every decision shown (states, previews, forecasts) comes from
// ternd, which computes it with tern-core: this file only lays it out.
'use strict';

(() => {
  const TOKEN_KEY = 'tern.token';
  const POLL_MS = 2000;
  const PAGE_SIZE = 50;
  const main = document.getElementById('main');
  let me = null;
  let timer = null;
  let current = null;
  let generation = 0;
  let updates = 0;

  // ---- helpers -------------------------------------------------------------

  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'class') e.className = v;
      else if (k === 'on') for (const [ev, f] of Object.entries(v)) e.addEventListener(ev, f);
      else e.setAttribute(k, v === true ? '' : String(v));
    }
    for (const kid of kids.flat(Infinity)) {
      if (kid === null || kid === undefined || kid === false) continue;
      e.append(kid instanceof Node ? kid : String(kid));
    }
    return e;
  }

  function when(t) {
    if (!t) return '—';
    const d = new Date(t);
    return isNaN(d) ? String(t) : d.toISOString().replace('T', ' ').replace(/:\d\d(\.\d+)?Z$/, ' UTC');
  }

  function pct(x) {
    return (Math.round(x * 1000) / 10) + '%';
  }

  // A state in the words ternctl prints (the API keeps Teleport's names, shown on hover).
  const STATE_WORDS = { unstarted: 'not started', canary: 'canary', active: 'in progress', done: 'complete', rolledback: 'rolledback' };
  function stateWord(state) { return STATE_WORDS[state] || state; }

  // Whether the host's updater verifies releases (the heartbeat's `trust`): what an
  // operator looks for to find the hosts that would install an unsigned release.
  function trustBadge(t) {
    if (!t) return badge('unknown', 'warn');
    return t.pinned ? badge('root v' + t.root_version, 'ok') : badge('unpinned', 'bad');
  }

  function badge(text, cls, title) {
    return el('span', { class: 'badge ' + (cls || ''), title: title || null }, text);
  }

  class ApiError extends Error {
    constructor(status, message) {
      super(message);
      this.status = status;
    }
  }

  async function api(method, path, body) {
    const headers = { Authorization: 'Bearer ' + (sessionStorage.getItem(TOKEN_KEY) || '') };
    if (body !== undefined) headers['Content-Type'] = 'application/json';
    const r = await fetch(path, {
      method,
      headers,
      cache: 'no-store',
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    let data = null;
    try {
      data = await r.json();
    } catch (_) {
      data = null;
    }
    if (!r.ok) {
      const msg = (data && data.error && data.error.message) || r.statusText || ('HTTP ' + r.status);
      // Logged in and refused: the token was revoked or expired. (While logging in,
      // the form shows the refusal itself.)
      if (r.status === 401 && me) logout('ternd refused the token: ' + msg);
      throw new ApiError(r.status, msg);
    }
    return data;
  }

  function rendered(page) {
    updates += 1;
    main.dataset.page = page;
    main.dataset.updates = String(updates);
    document.getElementById('updated').textContent = 'updated ' + new Date().toLocaleTimeString();
    // For the benchmark: milliseconds from navigation start to the first content.
    if (window.ternFirstRender === undefined) {
      window.ternFirstRender = performance.now();
      performance.mark('tern-first-render');
    }
  }

  // ---- log-in --------------------------------------------------------------

  function logout(why) {
    sessionStorage.removeItem(TOKEN_KEY);
    me = null;
    location.hash = '#/login';
    if (why) sessionStorage.setItem('tern.why', why);
  }

  function loginPage() {
    const why = sessionStorage.getItem('tern.why');
    sessionStorage.removeItem('tern.why');
    const input = el('input', { id: 'token', type: 'password', autocomplete: 'off', placeholder: 'tern_…' });
    const error = el('p', { id: 'login-error', class: 'error' }, why || '');
    const form = el('form', { class: 'login', id: 'login-form' },
      el('h1', {}, 'Log in'),
      el('p', { class: 'muted' }, 'Paste an API token (operator, user or viewer). It is kept in this tab only.'),
      input, error,
      el('button', { type: 'submit', id: 'login' }, 'Log in'));
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      sessionStorage.setItem(TOKEN_KEY, input.value.trim());
      try {
        me = await api('GET', '/v1/whoami');
        location.hash = '#/rollout';
      } catch (e) {
        sessionStorage.removeItem(TOKEN_KEY);
        sessionStorage.removeItem('tern.why');
        error.textContent = e.status === 403
          ? 'this token cannot read the dashboard (it needs an operator, user or viewer token)'
          : 'log-in failed: ' + e.message;
      }
    });
    main.replaceChildren(form);
    rendered('login');
  }

  // ---- actions with the planner's preview ----------------------------------

  const dialog = document.getElementById('confirm');
  let pending = null;

  // `path` for the product the rollout page shows (`?product=`; the agent's without).
  function forProduct(path, product) {
    return product && product !== 'agent' ? path + '?product=' + encodeURIComponent(product) : path;
  }

  async function act(action, body, title, product) {
    const effects = document.getElementById('confirm-effects');
    const error = document.getElementById('confirm-error');
    const ok = document.getElementById('confirm-ok');
    document.getElementById('confirm-title').textContent = title;
    effects.replaceChildren(el('li', { class: 'muted' }, 'asking the planner…'));
    error.textContent = '';
    ok.disabled = true;
    pending = { action, body, product };
    dialog.showModal();
    try {
      const p = await api('POST', forProduct('/v1/preview/' + action, product), body);
      effects.replaceChildren(...p.effects.map((e) => el('li', {}, e)));
      ok.disabled = false;
    } catch (e) {
      effects.replaceChildren();
      error.textContent = e.message;
    }
  }

  document.getElementById('confirm-cancel').addEventListener('click', () => {
    pending = null;
    dialog.close();
  });
  document.getElementById('confirm-ok').addEventListener('click', async () => {
    if (!pending) return;
    const { action, body, product } = pending;
    const ok = document.getElementById('confirm-ok');
    ok.disabled = true;
    try {
      await api('POST', forProduct('/v1/agents/' + action, product), body);
      pending = null;
      dialog.close();
      refresh();
    } catch (e) {
      document.getElementById('confirm-error').textContent = e.message;
    }
  });

  // A write button: enabled only when the token's role may (ternd refuses anyway).
  function writeButton(label, action, body, title, needs, product) {
    const allowed = me && (needs === 'operator' ? me.operator : me.write);
    return el('button', {
      type: 'button',
      'data-action': action,
      'data-group': body && body.groups && body.groups.length === 1 ? body.groups[0] : null,
      disabled: !allowed,
      title: allowed ? null : 'needs ' + (needs === 'operator' ? 'an operator' : 'a user or operator') + ' token',
      on: { click: () => allowed && act(action, body, title, product) },
    }, label);
  }

  // ---- pages ---------------------------------------------------------------

  const pages = {
    rollout: {
      mount(params) {
        const product = params.get('product') || 'agent';
        return el('section', {}, el('h1', { id: 'rollout-title' }, product === 'agent' ? 'Rollout' : 'Rollout of ' + product),
          el('div', { id: 'content' }, el('p', { class: 'muted' }, 'loading…')));
      },
      async update(box, params) {
        const product = params.get('product') || 'agent';
        const [s, products] = await Promise.all([
          api('GET', forProduct('/v1/agents/status', product)),
          api('GET', '/v1/products').catch(() => null)]);
        const r = s.rollout;
        const cards = el('div', { class: 'cards' },
          card('Versions', r ? r.spec.start_version + ' → ' + r.spec.target_version : '—', 'versions'),
          card('Mode', s.mode, 'mode'),
          card('Rollout', r ? stateWord(r.status.state || 'unstarted') : 'none', 'rollout-state'),
          card('Hosts', s.up_to_date + ' / ' + s.present + ' on target' + (s.failed ? ', ' + s.failed + ' failed' : ''), 'hosts'));
        const why = s.why_stopped ? el('p', { class: 'badge warn', id: 'why-stopped' }, s.why_stopped) : null;
        const outdated = s.config_outdated ? el('p', { class: 'badge warn', id: 'config-outdated' }, withCode(s.config_outdated)) : null;
        const alerts = s.alerts.length
          ? el('ul', { class: 'alerts', id: 'alerts' }, s.alerts.map((a) => el('li', { 'data-kind': a.kind },
            (a.group ? a.group + ': ' : '') + a.message + ' (since ' + when(a.since) + ')')))
          : el('p', { class: 'muted', id: 'alerts' }, 'No alerts.');
        // What the config in force risks, worked out by ternd (a group that updates all at once).
        const risks = s.config_warnings.length
          ? el('ul', { class: 'config-warnings', id: 'config-warnings' }, s.config_warnings.map((w) =>
            el('li', { 'data-kind': w.kind, 'data-group': w.group }, w.message)))
          : null;
        const version = el('input', { id: 'new-version', placeholder: 'version', size: 8, disabled: !(me && me.operator) });
        const actions = el('div', { class: 'actions' },
          writeButton('Suspend', 'suspend', {}, 'Suspend ' + product + ' updates', null, product),
          writeButton('Resume', 'resume', {}, 'Resume ' + product + ' updates', null, product),
          writeButton('Roll back all', 'rollback', { groups: [] }, 'Roll back every group of ' + product, null, product),
          el('span', { class: 'muted' }, '·'), version,
          el('button', {
            type: 'button', 'data-action': 'new-rollout', disabled: !(me && me.operator),
            title: me && me.operator ? null : 'needs an operator token',
            on: {
              click: () => me && me.operator && act('new-rollout', { version: version.value.trim() },
                'New rollout of ' + product + ' to ' + version.value.trim(), product),
            },
          }, 'New rollout…'));
        const groups = r ? el('table', { id: 'groups' },
          el('thead', {}, el('tr', {}, ['Group', 'State', 'Reason', 'Window', 'Progress', 'Canaries', ''].map((h) => el('th', {}, h)))),
          el('tbody', {}, s.groups.map((g) => groupRow(g, product)))) : el('p', { id: 'no-rollout' }, s.no_rollout_reason || 'no rollout');
        box.replaceChildren(...[productsTable(products, product), cards, why, outdated, el('h2', {}, 'Alerts'), alerts, haltGuide(s),
          risks && el('h2', {}, 'Config warnings'), risks, el('h2', {}, 'Groups'), actions, groups].filter((n) => n));
      },
    },
    inventory: {
      mount(params) {
        const f = (name) => params.get(name) || '';
        const state = el('select', { name: 'state' },
          ['', 'up-to-date', 'outdated', 'failed', 'unknown-group'].map((v) => el('option', { value: v, selected: v === f('state') }, v || 'any')));
        const form = el('form', { class: 'filters', id: 'filters' },
          el('label', {}, 'group', el('input', { name: 'group', value: f('group'), size: 10 })),
          el('label', {}, 'version', el('input', { name: 'version', value: f('version'), size: 8 })),
          el('label', {}, 'state', state),
          el('button', { type: 'submit' }, 'Filter'));
        form.addEventListener('submit', (ev) => {
          ev.preventDefault();
          const q = new URLSearchParams();
          for (const [k, v] of new FormData(form)) if (v) q.set(k, v);
          location.hash = '#/inventory' + (q.toString() ? '?' + q : '');
        });
        return el('section', {}, el('h1', {}, 'Inventory'), form, el('div', { id: 'content' }, el('p', { class: 'muted' }, 'loading…')));
      },
      async update(box, params) {
        const q = new URLSearchParams({ limit: String(PAGE_SIZE) });
        for (const k of ['group', 'version', 'state', 'cursor']) if (params.get(k)) q.set(k, params.get(k));
        const inv = await api('GET', '/v1/inventory?' + q);
        const rows = inv.agents.map((a) => {
          const unknown = inv.unknown_groups[a.group];
          return el('tr', {
            class: 'link', 'data-updater': a.updater_id,
            on: { click: () => { location.hash = '#/host/' + encodeURIComponent(a.updater_id); } },
          },
          el('td', {}, el('a', { href: '#/host/' + encodeURIComponent(a.updater_id) }, a.hostname || a.updater_id)),
          el('td', {}, a.group || el('span', { class: 'muted' }, '(none)'),
            unknown ? [' ', badge('unknown group → ' + unknown, 'warn unknown-group')] : null),
          el('td', {}, a.version),
          el('td', {}, a.rollback ? badge('rolled back', 'bad') : a.healthy === true ? badge('healthy', 'ok') : a.healthy === false ? badge('unhealthy', 'bad') : badge('unknown', 'warn'),
            a.install_failure ? [' ', badge(a.install_failure.version + ' failed: ' + a.install_failure.kind, 'bad')] : null,
            a.model && a.model !== 'rollout' ? [' ', badge(a.model, 'muted')] : null),
          el('td', { class: 'trust' }, trustBadge(a.trust)),
          el('td', {}, when(a.last_seen)));
        });
        const next = inv.next_cursor;
        const pager = el('div', { class: 'pager' },
          el('span', { id: 'matched' }, inv.matched + ' hosts match'),
          params.get('cursor') ? el('button', { type: 'button', on: { click: () => go(params, null) } }, 'First page') : null,
          next ? el('button', { type: 'button', id: 'next-page', on: { click: () => go(params, next) } }, 'Next page') : null);
        box.replaceChildren(el('table', { id: 'inventory' },
          el('thead', {}, el('tr', {}, ['Host', 'Group', 'Version', 'Health', 'Trust', 'Last seen'].map((h) => el('th', {}, h)))),
          el('tbody', {}, rows)), pager);
      },
    },
    host: {
      mount(params, id) {
        return el('section', {}, el('p', {}, el('a', { href: '#/inventory' }, '← inventory')),
          el('h1', { id: 'host-title' }, 'Host ', id), el('div', { id: 'content' }, el('p', { class: 'muted' }, 'loading…')));
      },
      async update(box, params, id) {
        const h = await api('GET', '/v1/inventory/' + encodeURIComponent(id));
        const a = h.agent;
        // Titled by what people call the host; the updater id stays below (and in the URL).
        const title = document.getElementById('host-title');
        if (title && a.hostname) {
          title.textContent = a.hostname;
        }
        const f = h.forecast;
        const dl = (pairs) => el('dl', {}, pairs.filter((p) => p).map(([k, v]) => [el('dt', {}, k), el('dd', {}, v)]));
        box.replaceChildren(
          el('h2', {}, 'When will it update?'),
          el('div', { class: 'forecast', id: 'forecast', 'data-outlook': f.outlook }, f.summary),
          dl([
            ['serving group', (f.serving_group || '—') + (f.unknown_group ? ' (its group ' + a.group + ' is unknown: the catch-all serves it)' : '')],
            ['group state', f.group_state || '—'],
            ['canary', f.canary ? 'yes' : 'no'],
            ['find says', (f.find_version || '—') + (f.find_update ? ', update now' : ', hold')],
            ['place in backpressure order', pct(f.position) + (f.progress !== null && f.progress !== undefined ? ' (progress ' + pct(f.progress) + ')' : ' (no backpressure)')
              + (f.peers ? ', ' + f.ahead + ' of ' + f.peers + ' hosts ahead' : '')],
            f.waiting_for.length ? ['waits for', f.waiting_for.join(', ')] : null,
            ['may start at', when(f.starts_at)],
            ['window', (f.window_open ? 'open now' : 'closed') + (f.next_window ? '; the next opens ' + when(f.next_window) : '')],
            f.directed ? ['directive', el('span', { id: 'directed', 'data-when': f.directed.when },
              f.directed.directive + ' → ' + (f.directed.target || '—') + ': ' + f.directed.when.replace('_', ' ')
              + (f.directed.starts_at ? ' ' + when(f.directed.starts_at) : '')
              + (f.directed.holds && f.directed.holds.length ? ' (' + f.directed.holds.join(', ') + ')' : ''))] : null,
          ]),
          el('h2', {}, 'Now'),
          dl([
            ['hostname', a.hostname], ['updater id', a.updater_id], ['host id', a.host_id],
            ['group', a.group || '(none)'], ['version', a.version],
            ['updater', (a.updater_version || '?') + ' (' + a.updater_status + ')'],
            ['health', a.healthy === true ? 'healthy' : a.healthy === false ? 'unhealthy' : 'unknown (its updater cannot tell)'],
            ['follows', a.model || 'rollout'],
            ['trust', !a.trust ? 'unknown: its updater does not say whether it verifies releases'
              : a.trust.pinned ? 'verified: pins release root v' + a.trust.root_version + ' and installs only signed releases'
                : 'unverified: pins no release root, so it installs whatever it is told (tern-update enable --trust-root)'],
            a.install_failure ? ['failed install', a.install_failure.version + ': ' + a.install_failure.kind + ' (' + a.install_failure.error + ')'] : null,
            // Why its last update failed, as its updater recorded it (ternd cleaned it).
            a.update_failure ? ['last update failed', el('span', { id: 'update-failure' },
              a.update_failure.version + ': ' + a.update_failure.error
              + (a.update_failure.time ? ' (' + when(a.update_failure.time) + ')' : ''))] : null,
            a.update_failure && a.update_failure.agent_output
              ? ["the agent's last output", el('pre', { id: 'agent-output' }, a.update_failure.agent_output)] : null,
            ['rolled back', a.rollback ? 'yes' + (a.failed_version ? ' (from ' + a.failed_version + '): it will not retry ' + a.failed_version
              + ' (publish a fix, or `tern-update pin --force-version ' + a.failed_version + '` on the host to retry it)' : '') : 'no'],
            ['first seen', when(a.first_seen)], ['last seen', when(a.last_seen)],
            a.install_result ? ['last install', JSON.stringify(a.install_result)] : null,
            a.install_state ? ['install state', String(a.install_state)] : null,
          ]),
          el('h2', {}, 'History'),
          h.history_error ? el('p', { class: 'error' }, h.history_error) : '',
          h.history.length === 0 ? el('p', { class: 'muted' }, 'Nothing recorded yet.')
            : el('table', { id: 'history' },
              el('thead', {}, el('tr', {}, ['When', 'What', 'Heard by'].map((c) => el('th', {}, c)))),
              el('tbody', {}, h.history.map((e) => el('tr', { 'data-kind': e.kind },
                el('td', {}, when(e.time)), el('td', {}, e.message), el('td', { class: 'muted' }, e.replica))))));
      },
    },
    tokens: {
      mount() {
        return el('section', {}, el('h1', {}, 'Tokens'),
          el('p', { class: 'muted' }, 'Tokens are listed by id: ternd keeps only their hashes, so no secret is ever shown.'),
          el('div', { id: 'content' }));
      },
      async update(box) {
        let list;
        try {
          list = await api('GET', '/v1/tokens');
        } catch (e) {
          if (e.status !== 403) throw e;
          box.replaceChildren(el('p', { id: 'tokens-denied' }, 'Listing tokens needs an operator token.'));
          return;
        }
        box.replaceChildren(el('table', { id: 'tokens' },
          el('thead', {}, el('tr', {}, ['Id', 'Role', 'Description', 'Created', 'Expires', 'Uses left', 'Host'].map((h) => el('th', {}, h)))),
          el('tbody', {}, list.map((t) => el('tr', {},
            el('td', {}, t.id), el('td', {}, t.role), el('td', {}, t.description || ''),
            el('td', {}, when(t.created)), el('td', {}, when(t.expires)),
            el('td', {}, t.uses_left === undefined ? '' : t.uses_left), el('td', {}, t.updater_id || ''))))));
      },
    },
    history: {
      mount() {
        return el('section', {}, el('h1', {}, 'History'), el('div', { id: 'content' }, el('p', { class: 'muted' }, 'loading…')));
      },
      async update(box) {
        const h = await api('GET', '/v1/agents/history?limit=5');
        box.replaceChildren(h.rollouts.length
          ? el('div', { id: 'history' }, h.rollouts.map(rolloutHistory))
          : el('p', { class: 'muted', id: 'history' }, 'No rollout recorded yet.'));
      },
    },
    channels: {
      mount() {
        return el('section', {}, el('h1', {}, 'Channels'), el('div', { id: 'content' }));
      },
      async update(box) {
        const list = await api('GET', '/v1/channels');
        box.replaceChildren(list.length ? el('table', { id: 'channels' },
          el('thead', {}, el('tr', {}, ['Channel', 'Version', 'Critical', 'Updated'].map((h) => el('th', {}, h)))),
          el('tbody', {}, list.map((c) => el('tr', {},
            el('td', {}, c.name), el('td', {}, c.version),
            el('td', {}, c.critical ? badge('critical', 'bad') : 'no'), el('td', {}, when(c.updated))))))
          : el('p', { class: 'muted', id: 'channels' }, 'No channels.'));
      },
    },
  };

  // One rollout of the history: its versions and end, a chart of each group's hosts over
  // time, and its events as a timeline (newest last, as they happened).
  function rolloutHistory(h) {
    const r = h.rollout;
    const ended = r.ended
      ? (r.replaced_by ? 'replaced ' + when(r.ended) + ' by ' + r.replaced_by.start_version + ' → ' + r.replaced_by.target_version : 'ended ' + when(r.ended))
      : 'current';
    const kindWord = { group: 'group', canary_picked: 'canary', canary_healthy: 'canary', canary_failed: 'canary', alert_raised: 'alert', alert_cleared: 'alert', action: 'who' };
    const bad = { canary_failed: 1, alert_raised: 1 };
    const timeline = el('ol', { class: 'timeline', 'data-timeline': r.id }, h.events.map((e) => el('li', { 'data-kind': e.kind, class: bad[e.kind] ? 'bad' : '' },
      el('span', { class: 'muted' }, when(e.time) + ' '), badge(kindWord[e.kind] || 'rollout', bad[e.kind] ? 'bad' : 'muted'), ' ', e.message)));
    const charts = el('div', { class: 'charts' }, r.groups.map((g) => progressChart(g, h.progress.filter((p) => p.group === g), r.created)));
    return el('article', { class: 'rollout-history', 'data-rollout': r.id, 'data-ended': r.ended ? 'yes' : 'no' },
      el('h2', {}, r.start_version + ' → ' + r.target_version, ' ', el('span', { class: 'muted' }, 'started ' + when(r.created) + ' · ' + ended)),
      charts, timeline);
  }

  // A group's hosts over time: on the target, failed and pending, as steps (each sample
  // holds until the next). Plain SVG drawn here from ternd's samples.
  function progressChart(group, samples, since) {
    const NS = 'http://www.w3.org/2000/svg';
    const W = 240, H = 64;
    const svg = (tag, attrs) => {
      const e = document.createElementNS(NS, tag);
      for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
      return e;
    };
    const chart = svg('svg', { viewBox: '0 0 ' + W + ' ' + H, width: W, height: H, class: 'chart', 'data-chart': group, role: 'img' });
    const last = samples[samples.length - 1];
    const title = svg('title', {});
    title.textContent = group + (last ? ': ' + last.on_target + ' on target, ' + last.failed + ' failed, ' + last.pending + ' pending' : ': no hosts seen');
    chart.append(title);
    if (samples.length) {
      const t0 = Math.min(new Date(since).getTime(), new Date(samples[0].time).getTime());
      const t1 = Math.max(new Date(last.time).getTime(), t0 + 1);
      const top = Math.max(1, ...samples.map((p) => p.on_target + p.failed + p.pending));
      const x = (t) => ((new Date(t).getTime() - t0) / (t1 - t0)) * (W - 4) + 2;
      const y = (n) => H - 2 - (n / top) * (H - 4);
      for (const series of ['pending', 'failed', 'on_target']) {
        let pts = [];
        samples.forEach((p, i) => {
          if (i > 0) pts.push(x(p.time) + ',' + y(samples[i - 1][series]));
          pts.push(x(p.time) + ',' + y(p[series]));
        });
        pts.push((W - 2) + ',' + y(last[series]));
        chart.append(svg('polyline', { points: pts.join(' '), class: 'series-' + series, 'data-series': series, 'data-last': last[series] }));
      }
    }
    return el('figure', { class: 'chart-box' }, chart,
      el('figcaption', { class: 'muted' }, group + (last ? ': ' + last.on_target + ' on target, ' + last.failed + ' failed, ' + last.pending + ' pending' : ': no hosts seen')));
  }

  // Text whose `backquoted` parts are commands: laid out as code.
  function withCode(text) {
    return String(text).split('`').map((part, i) => (i % 2 ? el('code', {}, part) : part));
  }

  // At a halt: what an operator can do next, as ternd words it for ternctl too
  // (`next_steps` of the status).
  function haltGuide(s) {
    const n = s.next_steps;
    if (!n) return null;
    return el('div', { class: 'halt-guide', id: 'halt-guide' },
      el('h2', {}, n.title),
      el('ul', {}, n.steps.map((step) => el('li', {}, withCode(step)))));
  }

  function card(label, value, id) {
    return el('div', { class: 'card' }, el('div', { class: 'label' }, label), el('div', { class: 'value', id }, value));
  }

  // Every product ternd serves, each linking to its rollout (the one shown marked).
  function productsTable(v, shown) {
    if (!v || v.products.length < 2) return null;
    const groupsOf = (p) => p.groups.map((g) => g.name + ' ' + stateWord(g.state)).join(', ');
    return el('table', { id: 'products' },
      el('thead', {}, el('tr', {}, ['Product', 'Versions', 'Rollout', 'Mode', 'Hosts', 'Groups'].map((h) => el('th', {}, h)))),
      el('tbody', {}, v.products.map((p) => el('tr', {
        'data-product': p.name, 'data-state': p.state || 'none', class: p.name === shown ? 'current' : null,
      },
      el('td', {}, el('a', { href: p.name === 'agent' ? '#/rollout' : '#/rollout?product=' + encodeURIComponent(p.name) }, p.name),
        p.own_config ? el('span', { class: 'muted' }, ' (own config)') : null),
      el('td', {}, p.start_version ? p.start_version + ' → ' + p.target_version : '—'),
      el('td', {}, p.state ? stateWord(p.state) : el('span', { class: 'muted' }, 'no rollout'),
        p.alerts.length ? [' ', badge(p.alerts.length + ' alert' + (p.alerts.length > 1 ? 's' : ''), 'bad')] : null),
      el('td', {}, p.why_stopped ? badge(p.mode, 'warn', p.why_stopped) : p.mode),
      el('td', {}, p.up_to_date + ' / ' + p.present + ' on target' + (p.failed ? ', ' + p.failed + ' failed' : '')),
      el('td', { class: 'muted' }, groupsOf(p))))));
  }

  function groupRow(g, product) {
    const win = g.window_open_since
      ? 'open until ' + when(g.window_closes)
      : 'next ' + when(g.next_window);
    const share = g.present ? g.up_to_date / g.present : 0;
    const canaries = g.canaries && g.canaries.length
      ? g.canaries.map((c) => el('div', { 'data-canary': c.updater_id },
        (c.hostname || c.updater_id) + ' ',
        c.failed ? badge('failed', 'bad') : c.success ? badge('healthy on target', 'ok') : badge('pending', 'warn'),
        c.failed && c.reason ? el('div', { class: 'muted reason', 'data-canary-reason': c.updater_id }, c.reason) : null))
      : g.canary_wait ? el('span', { class: 'muted', 'data-canary-wait': g.name }, g.canary_count + ' to pick: ' + g.canary_wait)
        : (g.canary_count > 0 ? el('span', { class: 'muted' }, g.canary_count + ' to pick') : '—');
    const named = (v) => v === '' ? '(not said)' : v;
    const coverage = (g.canary_coverage || []).map((c) => el('div', { class: 'muted', 'data-coverage': c.attribute },
      c.attribute + ': covers ' + c.covered.map(named).join(', '),
      c.missed.length ? '; misses ' + c.missed.map(named).join(', ') : ''));
    const topology = (g.topology || []).map((t) => el('div', {
      class: 'muted', 'data-topology': t.key,
      title: 'per ' + t.key + ': hosts that may update now / hosts not yet on the target',
    },
      t.key + ' ≤' + t.max_in_flight + ' at once: ',
      Object.entries(t.values).map(([v, x]) => (v === '' ? '(no label)' : v) + ' ' + x.admitted + '/' + x.behind).join(', ') || 'no host behind',
      t.untracked_values ? '; ' + t.untracked_values + ' more values wait' : ''));
    const one = { groups: [g.name] };
    return el('tr', { 'data-group': g.name, 'data-state': g.state },
      el('td', {}, g.name, g.catch_all ? el('span', { class: 'muted' }, ' (catch-all)') : null),
      el('td', {}, badge(stateWord(g.state), 'state-' + g.state, 'API state: ' + g.state)),
      el('td', { 'data-reason': g.last_update_reason || '' }, g.last_update_reason || '',
        g.last_update_reason_text ? el('div', { class: 'muted' }, g.last_update_reason_text) : null,
        g.starts ? el('div', { class: 'starts', 'data-starts': g.name }, withCode(g.starts)) : null),
      el('td', {}, win),
      el('td', {},
        el('span', { class: 'bar', title: pct(share) }, el('span', { 'data-width': pct(share) })),
        ' ' + g.up_to_date + '/' + g.present,
        // Before its group starts no host of it tried this rollout's target: what is
        // counted is hosts unhealthy (or that rolled an earlier version back).
        g.failed ? [' ', g.state === 'unstarted'
          ? badge(g.failed + ' unhealthy', 'bad', 'not a failed update: this group has not started; the host runs its agent unhealthy or rolled an earlier version back')
          : badge(g.failed + ' failed', 'bad')] : null,
        g.refused ? Object.keys(g.refused).map((k) => [' ', badge(g.refused[k] + ' could not install (' + k + ')', 'bad')]) : null,
        g.state === 'active' && g.progress < 1 ? el('div', { class: 'muted' }, 'backpressure ' + pct(g.progress)) : null,
        topology, pendingHosts(g)),
      el('td', {}, canaries, coverage),
      el('td', {}, el('div', { class: 'actions' },
        writeButton('Start', 'start-update', one, 'Start updating ' + g.name, null, product),
        writeButton('Done', 'mark-done', one, 'Mark ' + g.name + ' done', null, product),
        writeButton('Roll back', 'rollback', one, 'Roll back ' + g.name, null, product))));
  }

  // A moving group's hosts not yet on the target, as the replica that answered knows
  // them, each with its next run.
  function pendingHosts(g) {
    const p = g.pending;
    if (!p || !p.total) return null;
    const more = p.total - p.hosts.length;
    return el('details', { class: 'pending', 'data-pending': g.name },
      el('summary', {}, p.total + ' pending on ' + p.replica),
      el('ul', {}, p.hosts.map((h) => el('li', { 'data-pending-host': h.updater_id },
        (h.hostname || h.updater_id) + ' runs ' + h.version + (h.failed ? ' (failed)' : '')
          + '; last run ' + when(h.last_seen) + ', next run by ' + when(h.next_run_by))),
      more > 0 ? el('li', { class: 'muted' }, 'and ' + more + ' more (Inventory)') : null));
  }

  // The bars' widths are set from script: the CSP forbids inline style attributes.
  function sizeBars(root) {
    for (const s of root.querySelectorAll('[data-width]')) s.style.width = s.dataset.width;
  }

  function go(params, cursor) {
    const q = new URLSearchParams(params);
    if (cursor) q.set('cursor', cursor);
    else q.delete('cursor');
    location.hash = '#/inventory' + (q.toString() ? '?' + q : '');
  }

  // ---- routing and polling -------------------------------------------------

  function parseHash() {
    const h = location.hash.replace(/^#/, '') || '/rollout';
    const [path, query] = h.split('?');
    const parts = path.split('/').filter(Boolean);
    return { page: parts[0] || 'rollout', id: parts[1] ? decodeURIComponent(parts[1]) : null, params: new URLSearchParams(query || '') };
  }

  async function refresh() {
    clearTimeout(timer);
    const mine = generation;
    if (!current || !current.page.update) return;
    if (!dialog.open) {
      const box = document.getElementById('content');
      try {
        await current.page.update(box, current.params, current.id);
        if (mine !== generation) return;
        sizeBars(box);
        rendered(current.name);
      } catch (e) {
        if (mine !== generation) return;
        box.replaceChildren(el('p', { class: 'error', id: 'page-error' }, e.message));
      }
    }
    if (mine === generation) timer = setTimeout(refresh, POLL_MS);
  }

  async function show() {
    generation += 1;
    clearTimeout(timer);
    const { page, id, params } = parseHash();
    const token = sessionStorage.getItem(TOKEN_KEY);
    const nav = document.getElementById('nav');
    const out = document.getElementById('logout');
    if (!token || page === 'login') {
      current = null;
      nav.hidden = true;
      out.hidden = true;
      document.getElementById('who').textContent = '';
      if (token && page === 'login') sessionStorage.removeItem(TOKEN_KEY);
      loginPage();
      return;
    }
    if (!me) {
      try {
        me = await api('GET', '/v1/whoami');
      } catch (e) {
        logout('ternd refused the token: ' + e.message);
        return;
      }
    }
    nav.hidden = false;
    out.hidden = false;
    document.getElementById('who').textContent = me.role + ' · token ' + me.token_id + (me.write ? '' : ' · read only');
    for (const a of nav.querySelectorAll('a')) a.classList.toggle('current', a.dataset.nav === (page === 'host' ? 'inventory' : page));
    const p = pages[page] || pages.rollout;
    current = { page: p, name: pages[page] ? page : 'rollout', id, params };
    main.replaceChildren(p.mount(params, id));
    refresh();
  }

  document.getElementById('logout').addEventListener('click', () => logout());
  window.addEventListener('hashchange', show);
  show();
})();
