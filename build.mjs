// Bundles src/ into dist/server.js: one CommonJS file that runs with `node dist/server.js`
// on Node.js 22.13+, alone in an empty folder (no package.json beside it, hence CommonJS).
// GET /docs's browser script and style (src/api/docs/) are inlined as text.
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

await Promise.all([
  build({ ...common, entryPoints: ['src/main.ts'], outfile: 'dist/server.js', banner: { js: '#!/usr/bin/env node' } }),
  build({ ...common, entryPoints: ['src/testkit.ts'], outfile: 'dist/testkit.cjs' }),
]);
