// SPDX-License-Identifier: MIT
// The streamq dashboard's script (served by `streamq dashboard`). Everything the server sends
// goes into the page as text (textContent and properties), never as markup: a payload can
// hold anything, <script> included. Actions are POSTs carrying the page's CSRF token.
'use strict';

const csrf = document.querySelector('meta[name="csrf-token"]').content;
const pageSize = 20;

// ---- small helpers

/** An element with properties (textContent, className, title, ...) and children (nodes or text). */
function el(tag, props, ...children) {
  const node = document.createElement(tag);
  Object.assign(node, props || {});
  for (const child of children) node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  return node;
}

function button(text, onclick, className) {
  return el('button', {type: 'button', textContent: text, onclick, className: className || ''});
}

async function request(path, options) {
  const res = await fetch(path, Object.assign({credentials: 'same-origin', cache: 'no-store'}, options));
  if (res.status === 401) {
    location.assign('/login');
    throw new Error('log in first');
  }
  let body = null;
  try {
    body = await res.json();
  } catch (_) {
    // not JSON: the status line says what happened
  }
  if (!res.ok) throw new Error((body && body.error) || `${res.status} ${res.statusText}`);
  return body;
}

const get = (path) => request(path);
const post = (path, body) => request(path, {
  method: 'POST',
  headers: {'Content-Type': 'application/json', 'X-CSRF-Token': csrf},
  body: JSON.stringify(body),
});

function status(text, bad) {
  const node = document.getElementById('status');
  node.textContent = bad ? text : `${text} · ${new Date().toLocaleTimeString()}`;
  node.classList.toggle('bad', Boolean(bad));
}

/** An action's outcome: stays beside the status line (which the refreshes rewrite) until the next. */
function notice(text, bad) {
  const node = document.getElementById('notice');
  node.textContent = `${text} · ${new Date().toLocaleTimeString()}`;
  node.classList.toggle('bad', Boolean(bad));
}

function duration(ms) {
  if (ms === null || ms === undefined) return '–';
  const s = ms / 1000;
  if (Math.abs(s) < 60) return `${s.toFixed(1)} s`;
  if (Math.abs(s) < 3600) return `${(s / 60).toFixed(1)} min`;
  if (Math.abs(s) < 86400) return `${(s / 3600).toFixed(1)} h`;
  return `${(s / 86400).toFixed(1)} d`;
}

function cut(text, n) {
  const s = String(text);
  return s.length > n ? `${s.slice(0, n)}…` : s;
}

function maxOf(values) {
  const known = values.filter((v) => v !== null && v !== undefined);
  return known.length ? Math.max(...known) : null;
}

function setText(id, value) {
  document.getElementById(id).textContent = String(value);
}

// ---- the list of queues

async function loadIndex() {
  try {
    const {queues} = await get('/api/queues');
    const rows = queues.map((q) => el('tr', {},
      el('td', {}, el('a', {href: `/queue?name=${encodeURIComponent(q.name)}`, textContent: q.name}),
        ...(q.partitions ? [el('span', {className: 'partitions', textContent: ` (${q.partitions} partitions)`})] : [])),
      el('td', {textContent: q.levels.join(', ')}),
      el('td', {textContent: q.length}),
      el('td', {textContent: q.delayed}),
      el('td', {textContent: q.dlq_length}),
      el('td', {textContent: q.paused ? 'paused' : 'running'})));
    document.querySelector('#queues tbody').replaceChildren(...rows);
    document.getElementById('no-queues').hidden = queues.length > 0;
    status('updated');
  } catch (e) {
    status(e.message, true);
  }
}

// ---- one queue

// The page's address: /queue?name=<queue>, and with task=<id>, flow=<id> or batch=<id> the detail
// view it opens (each detail view shown puts its own there, so the address bar can be shared).
const pageParams = new URLSearchParams(location.search);
const queue = pageParams.get('name') || '';
const detailKinds = ['task', 'flow', 'batch'];
const tables = [];
const charts = {};

// Chart id -> its lines: [series key, label, colour, divisor].
const chartLines = {
  'chart-backlog': [['queued', 'queued', '#3273dc'], ['pending', 'pending', '#e69500'], ['delayed', 'delayed', '#8e44ad']],
  'chart-throughput': [['done_per_s', 'done or retried/s', '#23a05a'], ['dead_per_s', 'dead-lettered/s', '#d9534f']],
  'chart-dead': [['dead', 'dead letters', '#d9534f']],
  'chart-age': [['oldest_age_ms', 'oldest task', '#3273dc', 1000], ['oldest_pending_idle_ms', 'oldest pending idle', '#e69500', 1000]],
};

function makeChart(id, lines) {
  return new Chart(document.getElementById(id), {
    type: 'line',
    data: {
      labels: [],
      datasets: lines.map(([, label, colour]) => ({
        label, data: [], borderColor: colour, backgroundColor: colour, pointRadius: 0, borderWidth: 2, spanGaps: true,
      })),
    },
    options: {
      animation: false,
      responsive: true,
      maintainAspectRatio: false,
      interaction: {mode: 'index', intersect: false},
      scales: {x: {ticks: {maxTicksLimit: 8}}, y: {beginAtZero: true}},
      plugins: {legend: {position: 'bottom'}},
    },
  });
}

function updateCharts(series) {
  if (typeof Chart === 'undefined') return;  // chart.min.js did not load: the numbers still do
  const labels = series.t_ms.map((t) => new Date(t).toLocaleTimeString());
  for (const [id, lines] of Object.entries(chartLines)) {
    if (!charts[id]) charts[id] = makeChart(id, lines);
    const chart = charts[id];
    chart.data.labels = labels;
    lines.forEach(([key, , , divisor], i) => {
      chart.data.datasets[i].data = series[key].map((v) => (v === null ? null : v / (divisor || 1)));
    });
    chart.update('none');
  }
}

async function loadQueue() {
  try {
    const d = await get(`/api/queue?name=${encodeURIComponent(queue)}`);
    const s = d.stats;
    setText('stat-queued', Math.max(0, s.queue_length - s.pending_total));
    setText('stat-pending', s.pending_total);
    setText('stat-delayed', s.delayed);
    setText('stat-dead', s.dlq_length);
    setText('stat-consumers', s.consumers_active);
    setText('stat-oldest', duration(maxOf(s.levels.map((l) => l.oldest_entry_age_ms))));
    setText('stat-idle', duration(maxOf(s.groups.map((g) => g.oldest_pending_idle_ms))));
    setText('sample-interval', d.sample_interval_s);
    document.getElementById('paused-badge').hidden = !d.paused;
    document.getElementById('pause').disabled = d.paused;
    document.getElementById('resume').disabled = !d.paused;
    updateCharts(d.series);
    if (d.sampler_error) status(`sampling failed: ${d.sampler_error}`, true);
    else status('updated');
  } catch (e) {
    status(e.message, true);
  }
}

// ---- the queue's tenants (docs/tenants.md)

// Tenants looked at per partition (the next to be served, and the waiting ones), and shown.
const tenantsLookedAt = 100;
const tenantsShown = 20;
let tenantsSeq = 0;

/** A limit of the tenant's own: – when it has none (the queue's default applies), none for 0. */
function limitText(v) {
  if (v === null || v === undefined) return '–';
  return v === 0 ? 'none' : String(v);
}

function rateText(t) {
  if (t.rate_limit === null || t.rate_per_ms === null) return '–';
  return t.rate_limit === 0 ? 'none' : `${t.rate_limit}/${duration(t.rate_per_ms)}`;
}

function tenantRow(t) {
  const toggle = t.paused
    ? button('Resume', () => act('tenant/resume', {tenant: t.tenant}), 'tenant-resume')
    : button('Pause', () => act('tenant/pause', {tenant: t.tenant}), 'tenant-pause');
  const tr = el('tr', {},
    el('td', {textContent: t.tenant, title: t.partition}),
    el('td', {textContent: t.backlog}),
    el('td', {textContent: t.running}),
    el('td', {textContent: t.paused ? 'paused' : ''}),
    el('td', {textContent: limitText(t.weight)}),
    el('td', {textContent: limitText(t.concurrency)}),
    el('td', {textContent: rateText(t)}),
    el('td', {textContent: limitText(t.max_len)}),
    el('td', {className: 'row-actions'}, toggle));
  tr.dataset.tenant = t.tenant;
  return tr;
}

/** The section stays hidden while no tenant of the queue has work. */
async function loadTenants() {
  const seq = ++tenantsSeq;
  try {
    const {tenants} = await get(`/api/tenants?name=${encodeURIComponent(queue)}&count=${tenantsLookedAt}`);
    if (seq !== tenantsSeq) return;
    document.querySelector('#tenants tbody').replaceChildren(...tenants.slice(0, tenantsShown).map(tenantRow));
    document.getElementById('tenants').hidden = tenants.length === 0;
    setText('tenants-note', tenants.length > tenantsShown
      ? `The ${tenantsShown} largest backlogs of ${tenants.length} tenants with work.`
      : `${tenants.length} tenants with work.`);
  } catch (e) {
    if (seq === tenantsSeq) status(e.message, true);
  }
}

// ---- the queue's stored schedules (streamq schedules, docs/cli-and-dashboard.md)

let schedulesSeq = 0;

/** An ISO 8601 time as the API gives it, without its milliseconds when they are 0. */
function tickText(iso) {
  return iso ? iso.replace('.000Z', 'Z') : '–';
}

/** Pausing asks for a note (why, by whom), shown beside the state; cancelling the prompt pauses nothing. */
function pauseSchedule(name) {
  const note = window.prompt(`Pause schedule ${name}: a note (why, by whom)?`, '');
  if (note === null) return;
  act('schedule/pause', {schedule: name, note});
}

function scheduleRow(s) {
  const toggle = s.paused
    ? button('Resume', () => act('schedule/resume', {schedule: s.name}), 'schedule-resume')
    : button('Pause', () => pauseSchedule(s.name), 'schedule-pause');
  const tr = el('tr', {},
    el('td', {textContent: s.name}),
    el('td', {textContent: s.schedule}),
    el('td', {textContent: s.task_type}),
    el('td', {textContent: s.paused ? `paused${s.note ? `: ${s.note}` : ''}` : 'running', className: 'schedule-state'}),
    el('td', {textContent: s.from_code ? 'code' : 'api'}),
    el('td', {textContent: s.next_ticks.length ? s.next_ticks.map(tickText).join(', ') : '–'}),
    el('td', {textContent: tickText(s.last_tick)}),
    el('td', {textContent: s.last_outcome || '–'}),
    el('td', {textContent: s.last_task_id || '–'}),
    el('td', {className: 'row-actions'}, toggle));
  tr.dataset.schedule = s.name;
  return tr;
}

/** The section stays hidden while the queue has no stored schedule. */
async function loadSchedules() {
  const seq = ++schedulesSeq;
  try {
    const {schedules} = await get(`/api/schedules?name=${encodeURIComponent(queue)}`);
    if (seq !== schedulesSeq) return;
    document.querySelector('#schedules tbody').replaceChildren(...schedules.map(scheduleRow));
    document.getElementById('schedules').hidden = schedules.length === 0;
  } catch (e) {
    if (seq === schedulesSeq) status(e.message, true);
  }
}

function refreshAll() {
  loadQueue();
  loadTenants();
  loadSchedules();
  for (const t of tables) t.load();
}

function describe(action, r) {
  switch (action) {
    case 'replay': return `replayed ${r.done}${r.skipped ? `, skipped ${r.skipped} (not tasks)` : ''}`;
    case 'delete': return `deleted ${r.done}`;
    case 'run_now': return r.entry_id ? `moved to the queue as ${r.entry_id}` : 'not delayed any more (it may have become due)';
    case 'cancel': return r.outcome === 'cancelled' ? 'cancelled'
      : r.outcome === 'running' ? 'a worker holds it: asked to stop it (it ends cancelled unless it finishes first)'
        : 'not found (finished, cancelled or moved meanwhile)';
    case 'tenant/pause': return `tenant ${r.tenant} paused`;
    case 'tenant/resume': return `tenant ${r.tenant} resumed`;
    case 'schedule/pause': return `schedule ${r.schedule} paused`;
    case 'schedule/resume': return `schedule ${r.schedule} resumed`;
    default: return r.paused ? 'paused' : 'resumed';
  }
}

/** Asks `question` first (when given); true when the action was confirmed and done. */
async function act(action, body, question) {
  if (question && !window.confirm(question)) return false;
  let done = false;
  try {
    const r = await post(`/api/${action}`, Object.assign({queue}, body));
    notice(describe(action, r));
    done = true;
  } catch (e) {
    notice(`${action}: ${e.message}`, true);
  }
  refreshAll();
  return done;
}

/** Puts `kind`=`id` (a detail view) in the page's address, or none when `kind` is null. */
function showInAddress(kind, id) {
  const params = new URLSearchParams({name: queue});
  if (kind) params.set(kind, id);
  history.replaceState(null, '', `${location.pathname}?${params}`);
}

/** The detail view: `value` as JSON, a flow's neighbours; `kind` and `id` go in the address. */
function showDetail(title, value, flow, kind, id) {
  setText('detail-title', title);
  setText('detail', JSON.stringify(value, null, 2));
  showFlow(flow);
  showInAddress(kind, id);
  const box = document.getElementById('detail-box');
  box.hidden = false;
  box.scrollIntoView();
}

/** A flow's task (docs/workflows.md): its parent and its children, each a link to its record. */
function showFlow(flow) {
  const node = document.getElementById('detail-flow');
  node.replaceChildren();
  node.hidden = !flow;
  if (!flow) return;
  const link = (t) => {
    const b = button(t.task_id, () => showRecord(t.task_id, t.queue), 'link');
    b.dataset.task = t.task_id;
    return b;
  };
  const described = (t) => (t.state === null ? 'no record (its retention passed)' : `${t.task_type} · ${t.state}`);
  if (flow.parent) {
    node.append(el('p', {className: 'flow-parent'}, 'Parent: ', link(flow.parent), ` ${described(flow.parent)}`));
  }
  if (flow.children.length) {
    const shown = flow.children.length < flow.children_total ? ` (the first ${flow.children.length})` : '';
    node.append(el('p', {}, `Children: ${flow.children_total}${shown}`));
    const body = el('tbody');
    for (const c of flow.children) {
      const elsewhere = c.queue && c.queue !== queue ? ` (queue ${c.queue})` : '';
      const tr = el('tr', {}, el('td', {}, link(c), elsewhere), el('td', {textContent: c.task_type ?? ''}),
        el('td', {textContent: c.state ?? 'no record'}));
      tr.dataset.child = c.task_id;
      body.append(tr);
    }
    node.append(el('table', {className: 'flow-children'},
      el('thead', {}, el('tr', {}, el('th', {textContent: 'task id'}), el('th', {textContent: 'type'}),
        el('th', {textContent: 'state'}))), body));
  }
}

/**
 * A task by entry id (`<partition>/<id>` in a partitioned queue) or task id: where it is, what its
 * holder is doing, and the record of a tracked one (also once it finished and left the queue).
 * `listed`: the task as a table listed it, shown when it has left the queue since.
 */
async function showTask(id, listed) {
  try {
    const r = await get(`/api/task?name=${encodeURIComponent(queue)}&id=${encodeURIComponent(id)}`);
    if (r.task) return showDetail(id, r.task, r.flow, 'task', id);
    if (r.record) return showDetail(id, r.record, r.flow, 'task', id);
    if (listed) return showDetail(id, Object.assign({}, listed, {note: 'no longer in the queue'}), null, 'task', id);
    notice(`no task ${id} in ${queue}`, true);
  } catch (e) {
    notice(`look up: ${e.message}`, true);
  }
}

/**
 * The record of a tracked task by its task id (also once it finished and left the queue), in this
 * page's queue or in `inQueue` (a flow's task in another queue or partition), with its flow's
 * parent and children.
 */
async function showRecord(id, inQueue) {
  try {
    const r = await get(`/api/record?name=${encodeURIComponent(inQueue || queue)}&id=${encodeURIComponent(id)}`);
    if (!r.record) return notice(`no record of task ${id} (not tracked, or its retention passed)`, true);
    // (A task of another queue is not this page's: its address names none.)
    showDetail(id, r.record, r.flow, inQueue && inQueue !== queue ? null : 'flow', id);
  } catch (e) {
    notice(`look up: ${e.message}`, true);
  }
}

/** A batch (Producer::open_batch): its state and counts. */
async function showBatch(id) {
  try {
    const r = await get(`/api/batch?name=${encodeURIComponent(queue)}&id=${encodeURIComponent(id)}`);
    if (!r.batch) return notice(`no batch ${id} in ${queue} (never opened, or fired more than a day ago)`, true);
    const b = r.batch;
    showDetail(`batch ${id}`, b, null, 'batch', id);
    const summary = `${b.state} · ${b.total} members: ${b.done} done, ${b.failed} failed, ${b.pending} pending` +
      (b.parent_batch ? ` · in batch ${b.parent_batch}` : '');
    const node = document.getElementById('detail-flow');
    node.replaceChildren(el('p', {className: 'batch-summary', textContent: summary}));
    node.hidden = false;
  } catch (e) {
    notice(`look up: ${e.message}`, true);
  }
}

async function lookUp(event) {
  event.preventDefault();
  const id = document.getElementById('lookup-id').value.trim();
  if (id) await showRecord(id);
}

async function lookUpBatch(event) {
  event.preventDefault();
  const id = document.getElementById('batch-id').value.trim();
  if (id) await showBatch(id);
}

// State -> its own columns: [heading, value of a task].
const stateColumns = {
  pending: [['consumer', (t) => t.consumer], ['idle', (t) => duration(t.idle_ms)], ['deliveries', (t) => t.deliveries]],
  delayed: [['due', (t) => new Date(t.due_ms).toLocaleString()]],
  dead: [['reason', (t) => t.fields.reason || ''], ['error', (t) => cut(t.fields.error || '', 120)]],
  queued: [['level', (t) => t.level], ['attempt', (t) => t.fields.retry_count || '0']],
};

/** What names a task in an action: in a partitioned queue `<partition>/<id>` (entry ids of two
 * partitions can be equal), else its id. */
function taskRef(task) {
  return task.partition ? `${task.partition}/${task.id}` : task.id;
}

function taskRow(table, task) {
  const f = task.fields || {};
  const cells = [];
  const ref = taskRef(task);
  if (table.state === 'dead') {
    const box = el('input', {type: 'checkbox', checked: table.selected.has(ref), title: 'select'});
    box.onchange = () => (box.checked ? table.selected.add(ref) : table.selected.delete(ref));
    cells.push(el('td', {}, box));
  }
  const open = button(task.id, () => showTask(ref, task), 'link');
  open.dataset.entry = task.id;
  cells.push(
    el('td', {}, open),
    el('td', {textContent: f.task_id || ''}),
    el('td', {textContent: f.task_type || ''}),
    el('td', {className: 'payload', textContent: cut(f.payload ?? '', 120), title: f.payload ?? ''}));
  for (const [, value] of stateColumns[table.state]) cells.push(el('td', {textContent: value(task)}));
  const actions = el('td', {className: 'row-actions'});
  if (table.state === 'dead') {
    actions.append(
      button('Replay', () => act('replay', {ids: [ref]}, `Replay dead letter ${ref}?`)),
      button('Delete', () => act('delete', {ids: [ref]}, `Delete dead letter ${ref}?`), 'danger'));
  }
  if (table.state === 'delayed') actions.append(button('Run now', () => act('run_now', {task_id: ref})));
  if (table.state !== 'dead') {
    // A delayed task is named by its task id, a queued or held one by its entry.
    actions.append(button('Cancel', () => act('cancel', {id: ref}, `Cancel task ${ref}?`), 'danger'));
  }
  cells.push(actions);
  const tr = el('tr', {}, ...cells);
  tr.dataset.id = task.id;
  return tr;
}

/** The table of one state in its section: a page at a time, cursors kept for Previous. */
function taskTable(section) {
  const state = section.dataset.state;
  const headings = [...(state === 'dead' ? [''] : []), 'entry', 'task id', 'type', 'payload',
    ...stateColumns[state].map(([h]) => h), ''];
  const tbody = el('tbody');
  const info = el('span', {className: 'page-info'});
  // seq: the newest load; an older one's reply (a refresh that crossed a click) is dropped.
  const t = {state, cursors: [''], next: '', selected: new Set(), seq: 0};
  // The selection is of the page shown: a new page starts with none.
  const turn = (change) => { change(); t.selected.clear(); t.load(); };
  const first = button('First page', () => turn(() => { t.cursors = ['']; }), 'first');
  const prev = button('Previous', () => { if (t.cursors.length > 1) turn(() => t.cursors.pop()); }, 'prev');
  const next = button('Next page', () => { if (t.next) turn(() => t.cursors.push(t.next)); }, 'next');
  section.append(
    el('table', {}, el('thead', {}, el('tr', {}, ...headings.map((h) => el('th', {textContent: h})))), tbody),
    el('div', {className: 'pager'}, first, prev, next, info));
  t.load = async () => {
    const cursor = t.cursors[t.cursors.length - 1];
    const seq = ++t.seq;
    try {
      const page = await get(`/api/tasks?name=${encodeURIComponent(queue)}&state=${state}&count=${pageSize}` +
        `&cursor=${encodeURIComponent(cursor)}`);
      if (seq !== t.seq) return;
      t.next = page.next_cursor;
      const rows = page.tasks.map((task) => taskRow(t, task));
      if (!rows.length) rows.push(el('tr', {}, el('td', {colSpan: headings.length, className: 'empty', textContent: 'none'})));
      tbody.replaceChildren(...rows);
      next.disabled = !t.next;
      prev.disabled = t.cursors.length === 1;
      first.disabled = t.cursors.length === 1;
      info.textContent = `page ${t.cursors.length} · ${page.tasks.length} shown`;
    } catch (e) {
      if (seq === t.seq) status(e.message, true);
    }
  };
  return t;
}

function startQueue() {
  setText('queue-name', queue);
  document.title = `${queue} · streamq dashboard`;
  if (!queue) {
    status('no queue named: open /queue?name=<queue>', true);
    return;
  }
  document.getElementById('pause').onclick = () => act('pause', {});
  document.getElementById('resume').onclick = () => act('resume', {});
  document.getElementById('replay-all').onclick = () =>
    act('replay', {all: true}, `Replay all ${document.getElementById('stat-dead').textContent} dead letters of ${queue}?`);
  document.getElementById('detail-close').onclick = () => {
    document.getElementById('detail-box').hidden = true;
    showInAddress(null);
  };
  document.getElementById('lookup').onsubmit = lookUp;
  document.getElementById('batch-lookup').onsubmit = lookUpBatch;
  for (const section of document.querySelectorAll('section.tasks')) tables.push(taskTable(section));
  const dead = tables.find((t) => t.state === 'dead');
  const selected = () => [...dead.selected];
  // The selected ones: acted on once confirmed, and no longer selected once done.
  const onSelected = (action, verb) => async () => {
    const ids = selected();
    if (!ids.length) return notice(`select the dead letters to ${verb.toLowerCase()} first`, true);
    if (await act(action, {ids}, `${verb} ${ids.length} dead letters?`)) {
      for (const id of ids) dead.selected.delete(id);
      dead.load();
    }
  };
  document.querySelector('.replay-selected').onclick = onSelected('replay', 'Replay');
  document.querySelector('.delete-selected').onclick = onSelected('delete', 'Delete');
  // An address that names a task, a flow or a batch opens it.
  const opened = detailKinds.find((kind) => pageParams.get(kind));
  if (opened) ({task: showTask, flow: showRecord, batch: showBatch})[opened](pageParams.get(opened));
  refreshAll();
  setInterval(loadQueue, 2000);
  setInterval(() => {
    loadTenants();
    loadSchedules();
    for (const t of tables) t.load();
  }, 5000);
}

if (document.body.dataset.page === 'index') {
  loadIndex();
  setInterval(loadIndex, 5000);
} else if (document.body.dataset.page === 'queue') {
  startQueue();
}
