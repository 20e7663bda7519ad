// Bundles src/ into dist/server.js: one CommonJS file that runs with `node dist/server.js`
// on Node.js 20+, alone in an empty folder (no package.json beside it, hence CommonJS).
// It also bundles dist/testkit.cjs, the internals the in-process tests drive (the store
// engines, the PostgreSQL client); that file is for the tests only and is never shipped.
import { build } from 'esbuild';
import { readFileSync } from 'node:fs';

const pkg = JSON.parse(readFileSync(new URL('./package.json', import.meta.url), 'utf8'));

const common = {
  bundle: true,
  platform: 'node',
  format: 'cjs',
  target: 'node20',
  define: { __VERSION__: JSON.stringify(pkg.version) },
  legalComments: 'none',
  sourcemap: false,
  logLevel: 'warning',
};

await Promise.all([
  build({ ...common, entryPoints: ['src/main.ts'], outfile: 'dist/server.js', banner: { js: '#!/usr/bin/env node' } }),
  build({ ...common, entryPoints: ['src/testkit.ts'], outfile: 'dist/testkit.cjs' }),
]);
