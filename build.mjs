// Bundles src/ into dist/server.js: one CommonJS file that runs with `node dist/server.js`
// on Node.js 22.13+, alone in an empty folder (no package.json beside it, hence CommonJS).
// GET /docs's browser script and style (src/api/docs/) are inlined as text.
// It fails when anything but src/ and the standard library would go into dist/server.js.
// It also bundles dist/testkit.cjs, the internals the in-process tests drive (the store
// engines, the PostgreSQL client); that file is for the tests only and is never shipped.
import { build } from 'esbuild';
import { readFileSync } from 'node:fs';

const pkg = JSON.parse(readFileSync(new URL('./package.json', import.meta.url), 'utf8'));

// GET /docs inlines its browser script and style; they are plain files so that they read as what they are
const docsAsset = (name) => JSON.stringify(readFileSync(new URL(`./src/api/docs/${name}`, import.meta.url), 'utf8'));

const common = {
  bundle: true,
  platform: 'node',
  format: 'cjs',
  target: 'node22',
  define: { __VERSION__: JSON.stringify(pkg.version), __DOCS_SCRIPT__: docsAsset('page.js'), __DOCS_STYLE__: docsAsset('page.css') },
  legalComments: 'none',
  sourcemap: false,
  logLevel: 'warning',
};

const [server] = await Promise.all([
  build({ ...common, entryPoints: ['src/main.ts'], outfile: 'dist/server.js', banner: { js: '#!/usr/bin/env node' }, metafile: true }),
  build({ ...common, entryPoints: ['src/testkit.ts'], outfile: 'dist/testkit.cjs' }),
]);

// the shipped file is our source and the standard library alone: no package of node_modules (the
// dev dependencies: jose, the SDKs the tests drive) may be bundled into it, nor required by it
const bundled = [...new Set(Object.keys(server.metafile.inputs).filter((f) => !f.startsWith('src/')).map((f) => /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(f)?.[1] ?? f))];
const required = Object.values(server.metafile.outputs).flatMap((o) => o.imports.filter((i) => i.external && !/^node:|^[a-z_]+$/.test(i.path)).map((i) => i.path));
if (bundled.length > 0 || required.length > 0) {
  console.error(`build.mjs: dist/server.js must hold src/ and node: only; it took ${[...bundled, ...required].join(', ')}`);
  process.exit(1);
}
