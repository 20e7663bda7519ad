// The house's floors, checked: every module of src/ sits on a floor, and an import may only go
// to its own floor or one below (a request's path: server -> http -> api -> auth -> services ->
// live, providers -> store -> pg -> domain -> the leaves), and no module imports itself back
// through others (no cycle, `import type` included). Run alone (`node scripts/check-imports.mjs`:
// one line per problem, exit 1 when there is one) or through test/once/imports.test.mjs.
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, normalize, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');

/** The floors, top first: a module's floor is the first whose prefix names it. */
export const FLOORS = [
  { floor: 0, what: 'the command line and the test kit', prefixes: ['src/main.ts', 'src/testkit.ts'] },
  { floor: 1, what: 'the server and its wiring', prefixes: ['src/server.ts', 'src/app.ts'] },
  { floor: 2, what: 'HTTP: router, pipeline, bodies, connections', prefixes: ['src/http/'] },
  { floor: 3, what: 'the API: routes, the error table, OpenAPI, /docs', prefixes: ['src/api/'] },
  { floor: 4, what: 'authentication', prefixes: ['src/auth/'] },
  { floor: 5, what: 'use cases', prefixes: ['src/services/'] },
  { floor: 6, what: 'the live feed, the model providers, metrics', prefixes: ['src/live/', 'src/providers/', 'src/metrics.ts'] },
  { floor: 7, what: 'the store and its engines', prefixes: ['src/store/'] },
  { floor: 8, what: 'the PostgreSQL wire client', prefixes: ['src/pg/'] },
  { floor: 9, what: 'the domain: records, rules, errors', prefixes: ['src/domain/'] },
  { floor: 10, what: 'settings, logs, files, memory, the data directory', prefixes: ['src/config.ts', 'src/log.ts', 'src/files.ts', 'src/memory.ts', 'src/data-dir-lock.ts'] },
];

export function floorOf(file) {
  for (const f of FLOORS) if (f.prefixes.some((p) => (p.endsWith('/') ? file.startsWith(p) : file === p))) return f;
  return undefined;
}

export function sources(dir = 'src') {
  const out = [];
  for (const name of readdirSync(join(ROOT, dir))) {
    const rel = `${dir}/${name}`;
    if (statSync(join(ROOT, rel)).isDirectory()) out.push(...sources(rel));
    else if (name.endsWith('.ts')) out.push(rel);
  }
  return out.sort();
}

/**
 * The imports of a module (static, `import type`, re-exports, dynamic): relative ones as source
 * paths, others (`node:http`) as they are named; each with whether it brings types only.
 */
export function importsOf(file) {
  const text = readFileSync(join(ROOT, file), 'utf8');
  const out = new Map();
  const add = (spec, typeOnly) => {
    const key = spec.startsWith('.') ? normalize(join(dirname(file), spec.replace(/\.js$/, '.ts'))) : spec;
    out.set(key, (out.get(key) ?? true) && typeOnly);
  };
  // `import type {...}`, or `import {...}` whose every name is marked `type`, brings types only
  const typesOnly = (kind, names) => kind !== undefined || (/^\s*\{[^}]*\}\s*$/.test(names) && names.slice(names.indexOf('{') + 1, names.indexOf('}')).split(',').every((n) => n.trim() === '' || /^type\s/.test(n.trim())));
  for (const m of text.matchAll(/(?:^|[\s;])(?:import|export)(\s+type)?\b([^'";]*?)\bfrom\s*['"]([^'"]+)['"]/gm)) add(m[3], typesOnly(m[1], m[2]));
  for (const m of text.matchAll(/\bimport\s*\(\s*['"]([^'"]+)['"]\s*\)|^\s*import\s*['"]([^'"]+)['"]/gm)) add(m[1] ?? m[2], false);
  return [...out].map(([path, typeOnly]) => ({ path, typeOnly }));
}

/** The engines' folders: what only src/store/open.ts (and the engines themselves) may import. */
export const ENGINE_DIRS = ['src/store/sqlite/', 'src/store/postgres/', 'src/store/journal/'];

/**
 * What a floor may not know, beyond the floors' order: `from` (a path prefix) imports nothing
 * whose path starts with one of `not`; with `typesOk`, types alone may come.
 */
export const RULES = [
  { from: 'src/http/', not: ['src/store/', 'src/services/', 'src/live/', 'src/providers/'], why: 'http/ knows no store (the error table is the API\'s)' },
  { from: 'src/api/', not: ['src/store/'], typesOk: true, why: 'routes call services: of the store they know its records\' types only' },
  { from: 'src/live/', not: ['src/api/', 'src/http/'], why: 'live/ knows no HTTP' },
  { from: 'src/providers/', not: ['src/api/', 'src/http/'], why: 'providers/ build no envelope' },
  { from: 'src/services/', not: ['node:http', 'node:https'], why: 'use cases take plain inputs: no node:http' },
  // the engines (and the retired journal's reader and migration) are reached through src/store/open.ts
  // alone: the command line and the test kit too; an engine's own files import each other
  { from: 'src/', not: ENGINE_DIRS, except: ['src/store/open.ts', ...ENGINE_DIRS], why: 'src/store/open.ts is the one place that names the engines' },
];

/** Every problem: imports that go up a floor, modules on no floor, and cycles. */
export function check() {
  const files = sources();
  const imports = new Map(files.map((f) => [f, importsOf(f)]));
  const graph = new Map([...imports].map(([f, deps]) => [f, deps.map((d) => d.path).filter((p) => p.startsWith('src/'))]));
  const problems = [];
  for (const [file, deps] of imports) {
    const from = floorOf(file);
    if (from === undefined) {
      problems.push(`${file}: on no floor (add it to FLOORS in scripts/check-imports.mjs)`);
      continue;
    }
    for (const { path: dep, typeOnly } of deps) {
      const to = floorOf(dep);
      if (to !== undefined && to.floor < from.floor) problems.push(`${file} (floor ${from.floor}, ${from.what}) imports ${dep} (floor ${to.floor}, ${to.what}): up a floor`);
      for (const r of RULES) {
        if (!file.startsWith(r.from) || r.except?.some((e) => file.startsWith(e)) === true) continue;
        if (r.not.some((n) => dep.startsWith(n)) && !(r.typesOk === true && typeOnly)) problems.push(`${file} imports ${dep}: ${r.why}`);
      }
    }
  }
  // cycles: Tarjan's strongly connected components
  let index = 0;
  const idx = new Map();
  const low = new Map();
  const stack = [];
  const on = new Set();
  const strong = (v) => {
    idx.set(v, index);
    low.set(v, index++);
    stack.push(v);
    on.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!graph.has(w)) continue;
      if (!idx.has(w)) {
        strong(w);
        low.set(v, Math.min(low.get(v), low.get(w)));
      } else if (on.has(w)) low.set(v, Math.min(low.get(v), idx.get(w)));
    }
    if (low.get(v) === idx.get(v)) {
      const scc = [];
      let w;
      do {
        w = stack.pop();
        on.delete(w);
        scc.push(w);
      } while (w !== v);
      if (scc.length > 1) problems.push(`a cycle: ${scc.sort().join(' <-> ')}`);
    }
  };
  for (const f of files) if (!idx.has(f)) strong(f);
  return { files: files.length, imports: [...graph.values()].reduce((n, d) => n + d.length, 0), problems };
}

if (process.argv[1] !== undefined && relative(process.argv[1], fileURLToPath(import.meta.url)) === '') {
  const r = check();
  for (const p of r.problems) console.log(p);
  console.log(`${r.files} modules, ${r.imports} imports, ${r.problems.length} problem(s)`);
  process.exit(r.problems.length === 0 ? 0 : 1);
}
