// The Prometheus text exposition format (0.0.4), checked line by line: what GET /metrics must
// answer, and the samples of a scrape for the tests that count something.
import assert from 'node:assert/strict';

const METRIC_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*$/;
const FLOAT = /^(?:[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?|[+-]?Inf|NaN)$/;
const TYPES = ['counter', 'gauge', 'histogram', 'summary', 'untyped'];

/** Parses `{a="x",b="y"}` strictly (escapes \\ \" \n only); returns the labels in order. */
function parseLabels(text, where) {
  const labels = [];
  let i = 0;
  while (i < text.length) {
    const m = /^([a-zA-Z_][a-zA-Z0-9_]*)="/.exec(text.slice(i));
    assert.ok(m, `${where}: bad label syntax at "${text.slice(i)}"`);
    i += m[0].length;
    let value = '';
    for (;;) {
      assert.ok(i < text.length, `${where}: unterminated label value`);
      const c = text[i];
      if (c === '"') {
        i++;
        break;
      }
      if (c === '\\') {
        const e = text[i + 1];
        assert.ok(e === '\\' || e === '"' || e === 'n', `${where}: bad escape \\${e} in a label value`);
        value += e === 'n' ? '\n' : e;
        i += 2;
        continue;
      }
      assert.notEqual(c, '\n', `${where}: raw newline in a label value`);
      value += c;
      i++;
    }
    assert.ok(LABEL_NAME.test(m[1]) && !m[1].startsWith('__'), `${where}: label name ${m[1]}`);
    assert.equal(labels.some(([k]) => k === m[1]), false, `${where}: label ${m[1]} twice`);
    labels.push([m[1], value]);
    if (text[i] === ',') i++;
    else assert.equal(i, text.length, `${where}: expected , or } after a label`);
  }
  return labels;
}

function parseValue(v) {
  if (/^[+]?Inf$/.test(v)) return Infinity;
  if (v === '-Inf') return -Infinity;
  return Number(v);
}

/**
 * Validates a whole exposition: HELP/TYPE lines, metric and label syntax, numeric values,
 * families grouped and declared before their samples, no duplicate series, counters named
 * *_total and never negative, histograms with cumulative buckets ending at +Inf = _count.
 * Returns the samples: [{name, labels: {..}, value}].
 */
export function validateExposition(text) {
  assert.ok(text.length > 0 && text.endsWith('\n'), 'the exposition ends with a newline');
  const families = new Map(); // name -> {type, help}
  const samples = [];
  const series = new Set();
  const finished = new Set();
  let current;
  const familyOf = (name) => {
    if (families.has(name)) return name;
    for (const suffix of ['_bucket', '_sum', '_count']) {
      if (name.endsWith(suffix)) {
        const base = name.slice(0, -suffix.length);
        const f = families.get(base);
        if (f !== undefined && (f.type === 'histogram' || (f.type === 'summary' && suffix !== '_bucket'))) return base;
      }
    }
    return undefined;
  };
  const lines = text.slice(0, -1).split('\n');
  lines.forEach((line, idx) => {
    const where = `line ${idx + 1} "${line}"`;
    assert.notEqual(line.trim(), '', `${where}: blank line`);
    assert.equal(line, line.trimEnd(), `${where}: trailing whitespace`);
    if (line.startsWith('#')) {
      const help = /^# HELP (\S+) (.*)$/.exec(line);
      const type = /^# TYPE (\S+) (\S+)$/.exec(line);
      if (help !== null) {
        assert.match(help[1], METRIC_NAME, where);
        assert.ok(help[2].trim().length > 0, `${where}: empty help`);
        assert.doesNotMatch(help[2].replace(/\\[\\n]/g, ''), /\\/, `${where}: bad escape in help`);
        const f = families.get(help[1]) ?? { help: undefined, type: undefined };
        assert.equal(f.help, undefined, `${where}: HELP twice`);
        assert.equal(finished.has(help[1]) || samples.some((s) => familyOf(s.name) === help[1]), false, `${where}: HELP after samples`);
        f.help = help[2];
        families.set(help[1], f);
        return;
      }
      if (type !== null) {
        assert.match(type[1], METRIC_NAME, where);
        assert.ok(TYPES.includes(type[2]), `${where}: unknown type ${type[2]}`);
        const f = families.get(type[1]) ?? { help: undefined, type: undefined };
        assert.equal(f.type, undefined, `${where}: TYPE twice`);
        assert.equal(samples.some((s) => familyOf(s.name) === type[1]), false, `${where}: TYPE after samples`);
        f.type = type[2];
        families.set(type[1], f);
        if (type[2] === 'counter') assert.match(type[1], /_total$/, `${where}: a counter is named *_total`);
        return;
      }
      assert.fail(`${where}: a comment that is neither HELP nor TYPE`);
    }
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)(?: (-?\d+))?$/.exec(line);
    assert.ok(m, `${where}: not a sample line`);
    const [, name, labelText, valueText] = m;
    assert.match(valueText, FLOAT, `${where}: value`);
    const labels = parseLabels(labelText ?? '', where);
    const family = familyOf(name);
    assert.ok(family !== undefined, `${where}: sample of an undeclared family`);
    const f = families.get(family);
    assert.ok(f.type !== undefined && f.help !== undefined, `${where}: family ${family} has HELP and TYPE before its samples`);
    if (current !== family) {
      assert.equal(finished.has(family), false, `${where}: the samples of ${family} are not grouped together`);
      if (current !== undefined) finished.add(current);
      current = family;
    }
    const key = `${name}{${labels.map(([k, v]) => `${k}=${JSON.stringify(v)}`).sort().join(',')}}`;
    assert.equal(series.has(key), false, `${where}: duplicate series`);
    series.add(key);
    const value = parseValue(valueText);
    if (f.type === 'counter' || f.type === 'histogram') assert.ok(value >= 0, `${where}: negative`);
    if (f.type === 'gauge') assert.ok(Number.isFinite(value), `${where}: gauge not finite`);
    samples.push({ name, family, labels: Object.fromEntries(labels), value });
  });

  // histograms: per series (labels without le), buckets ascending and cumulative, +Inf = _count
  for (const [name, f] of families) {
    if (f.type !== 'histogram') continue;
    const groups = new Map();
    for (const s of samples.filter((x) => x.family === name)) {
      const { le, ...rest } = s.labels;
      const key = JSON.stringify(Object.entries(rest).sort());
      const g = groups.get(key) ?? { buckets: [], sum: undefined, count: undefined };
      if (s.name === `${name}_bucket`) {
        assert.ok(le !== undefined, `${name}_bucket without le`);
        assert.match(le, FLOAT);
        g.buckets.push([parseValue(le), s.value]);
      } else if (s.name === `${name}_sum`) g.sum = s.value;
      else if (s.name === `${name}_count`) g.count = s.value;
      else assert.fail(`${s.name} in histogram ${name}`);
      groups.set(key, g);
    }
    for (const [key, g] of groups) {
      assert.ok(g.buckets.length > 0 && g.sum !== undefined && g.count !== undefined, `${name}${key}: buckets, _sum and _count`);
      for (let i = 1; i < g.buckets.length; i++) {
        assert.ok(g.buckets[i][0] > g.buckets[i - 1][0], `${name}${key}: le ascending`);
        assert.ok(g.buckets[i][1] >= g.buckets[i - 1][1], `${name}${key}: buckets cumulative`);
      }
      assert.equal(g.buckets.at(-1)[0], Infinity, `${name}${key}: the last bucket is +Inf`);
      assert.equal(g.buckets.at(-1)[1], g.count, `${name}${key}: +Inf = _count`);
      assert.ok(g.count === 0 || g.sum > 0, `${name}${key}: sum`);
    }
  }
  return { families, samples };
}

export async function scrape(s) {
  const r = await s.request('GET', '/metrics');
  assert.equal(r.status, 200);
  return validateExposition(r.text).samples;
}

/** The value of one series; labels must match exactly the given ones (plus any not named when loose). */
export function value(samples, name, labels = {}) {
  const hits = samples.filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v) && Object.keys(s.labels).length === Object.keys(labels).length);
  assert.ok(hits.length <= 1, `${name} ${JSON.stringify(labels)} is one series`);
  return hits[0]?.value ?? 0;
}

export function total(samples, name, pred = () => true) {
  return samples.filter((s) => s.name === name && pred(s.labels)).reduce((a, s) => a + s.value, 0);
}
