// "No import runs back up a floor and there is no cycle" (issue 29): the house's floors, from
// the request's edge down to the domain, checked over every import of src/ by
// scripts/check-imports.mjs, with what each floor may not know (http/ no store, live/ no HTTP,
// providers/ no envelope, services/ no node:http, one place naming the engines).
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'node:test';
import { check, ENGINE_DIRS, FLOORS, importsOf, sources } from '../../scripts/check-imports.mjs';

test("[D-house-1] [D-house-2] no import of src/ goes up a floor, breaks a floor's rule, or comes back to itself", () => {
  const r = check();
  assert.deepEqual(r.problems, []);
  assert.ok(r.files > 50 && r.imports > 200, `${r.files} modules, ${r.imports} imports read`);
  assert.equal(new Set(FLOORS.map((f) => f.floor)).size, FLOORS.length, 'each floor once');
});

test('[D-house-4] the engines are imported through src/store/open.ts alone, by the command line and the test kit too', () => {
  // read here from the imports themselves, not from the check's rules: an exception added there shows here
  const reaching = [];
  for (const file of sources()) {
    if (file === 'src/store/open.ts' || ENGINE_DIRS.some((d) => file.startsWith(d))) continue;
    for (const { path } of importsOf(file)) if (ENGINE_DIRS.some((d) => path.startsWith(d))) reaching.push(`${file} -> ${path}`);
  }
  assert.deepEqual(reaching, []);
  assert.deepEqual(ENGINE_DIRS, ['src/store/sqlite/', 'src/store/postgres/', 'src/store/journal/']);
  const open = importsOf('src/store/open.ts').map((i) => i.path);
  for (const d of ENGINE_DIRS) assert.ok(open.some((p) => p.startsWith(d)), `open.ts names ${d}`);
});

test('[D-house-5] a write is a value: no write of the Store takes a function, and no use case hands the store one', () => {
  const ROOT = fileURLToPath(new URL('../..', import.meta.url));
  const text = readFileSync(join(ROOT, 'src/store/store.ts'), 'utf8');
  const contract = text.slice(text.indexOf('export interface Store {'), text.indexOf('\n}\n', text.indexOf('export interface Store {')));
  const writes = ['createSession', 'updateSession', 'deleteSession', 'appendTurn', 'appendTurns', 'updateTurn', 'endReply', 'deleteTurn', 'forkSession', 'appendDelta'];
  for (const w of writes) {
    const sig = new RegExp(`^\\s*${w}\\((.*)\\): Promise`, 'm').exec(contract);
    assert.ok(sig !== null, `Store.${w} is declared`);
    assert.doesNotMatch(sig[1], /=>/, `Store.${w} takes values only`);
  }
  // the decisions are one function per kind of write, beside the values
  const decide = readFileSync(join(ROOT, 'src/store/decide.ts'), 'utf8');
  for (const kind of ['Create', 'Update', 'Delete', 'Turns', 'Edit', 'DeleteTurns', 'Fork', 'Delta']) assert.match(decide, new RegExp(`^function decide${kind}\\(view: WriteView, w: `, 'm'));
  // each call's arguments, read to their closing parenthesis, hold no arrow function
  for (const f of sources().filter((x) => x.startsWith('src/services/') || x.startsWith('src/live/'))) {
    const t = readFileSync(join(ROOT, f), 'utf8');
    for (const m of t.matchAll(new RegExp(`store\\.(${writes.join('|')})\\(`, 'g'))) {
      let depth = 1;
      let i = (m.index ?? 0) + m[0].length;
      for (; i < t.length && depth > 0; i++) depth += t[i] === '(' ? 1 : t[i] === ')' ? -1 : 0;
      assert.doesNotMatch(t.slice((m.index ?? 0) + m[0].length, i), /=>/, `${f}: store.${m[1]} is handed a value`);
    }
  }
});

test('no file of src/ is over 500 lines, and each opens with a comment saying its job (issue 43, the house)', () => {
  const ROOT = fileURLToPath(new URL('../..', import.meta.url));
  const over = [];
  const silent = [];
  for (const f of sources()) {
    const text = readFileSync(join(ROOT, f), 'utf8');
    if (text.split('\n').length - 1 > 500) over.push(f);
    if (!/^\/\/ \S/.test(text)) silent.push(f);
  }
  assert.deepEqual(over, [], 'over 500 lines');
  assert.deepEqual(silent, [], 'without a first line saying its job');
});

test('[D-house-3] every code has its status in the one table; only the pipeline turns a throw into an answer', () => {
  const ROOT = fileURLToPath(new URL('../..', import.meta.url));
  const read = (f) => readFileSync(join(ROOT, f), 'utf8');
  const codes = [...read('src/domain/errors.ts').matchAll(/^\s*\|\s*'([a-z_]+)'/gm)].map((m) => m[1]);
  const table = read('src/api/errors.ts');
  const block = table.slice(table.indexOf('const STATUS'), table.indexOf('};', table.indexOf('const STATUS')));
  const statuses = Object.fromEntries([...block.matchAll(/^\s*([a-z_]+): (\d{3}),$/gm)].map((m) => [m[1], Number(m[2])]));
  assert.ok(codes.length > 10, `${codes.length} codes read`);
  assert.deepEqual(Object.keys(statuses).sort(), [...codes].sort(), 'each code once in the table');
  const sources = [];
  const walk = (dir) => {
    for (const name of readdirSync(join(ROOT, dir))) {
      const rel = `${dir}/${name}`;
      if (statSync(join(ROOT, rel)).isDirectory()) walk(rel);
      else if (name.endsWith('.ts')) sources.push(rel);
    }
  };
  walk('src');
  const using = (re) => sources.filter((f) => re.test(read(f)));
  assert.deepEqual(using(/\bhttpErrorOf\(/).sort(), ['src/api/errors.ts', 'src/http/pipeline.ts'], 'the error edge is the pipeline');
  assert.deepEqual(using(/\bnew HttpError\(/).filter((f) => !f.startsWith('src/api/') && !f.startsWith('src/http/')), [], 'below the API, errors are domain errors');
});

test('[D-engines-4] no engine file spells a rule src/store/sql.ts writes once', () => {
  const ROOT = fileURLToPath(new URL('../..', import.meta.url));
  const engineFiles = ['src/store/sqlite', 'src/store/postgres'].flatMap((d) => readdirSync(join(ROOT, d)).map((f) => `${d}/${f}`));
  for (const [what, re] of [
    ['the liveness rule', /expires_at IS NOT NULL THEN/],
    ['the expiry queries', /expires_at IS NOT NULL AND expires_at <=/],
    ['the walk up a path', /JOIN path p ON t\.id = p\.parent_id/],
    ['a list\'s half, in list order', /ORDER BY s\.updated_at DESC, s\.id DESC|ORDER BY t\.updated_at DESC, t\.session DESC/],
    ['the filters a list\'s index does not serve', /o\.session = s\.id AND o\.tag =/],
  ]) {
    assert.deepEqual(engineFiles.filter((f) => re.test(readFileSync(join(ROOT, f), 'utf8'))), [], `${what} is written in an engine`);
    assert.match(readFileSync(join(ROOT, 'src/store/sql.ts'), 'utf8'), re, `${what} is in src/store/sql.ts`);
  }
});
