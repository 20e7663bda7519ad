// A fresh clone: what `npm start` gives a newcomer, and what stays out of git.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { EXAMPLE_PROVIDERS, removeDir, ROOT, tempDir, TEST_PROVIDERS } from '../helpers.mjs';

const SEED = join(ROOT, 'scripts', 'example-providers.mjs');

function seed(env) {
  return spawnSync(process.execPath, [SEED], { cwd: ROOT, env: { PATH: process.env.PATH, ...env }, encoding: 'utf8' });
}

describe('A fresh clone', () => {
  test('[D-docs-9] npm start copies the example providers file only where none is, never over one or PROVIDERS_FILE', () => {
    const dir = tempDir();
    try {
      const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8'));
      assert.match(pkg.scripts.start, /node scripts\/example-providers\.mjs && node dist\/server\.js$/);
      const dataDir = join(dir, 'data');
      const first = seed({ DATA_DIR: dataDir });
      assert.equal(first.status, 0, first.stderr);
      const file = join(dataDir, 'providers.json');
      assert.equal(readFileSync(file, 'utf8'), readFileSync(EXAMPLE_PROVIDERS, 'utf8'));
      assert.match(first.stderr, /copied the example providers to .*providers\.json/);
      writeFileSync(file, '[]');
      const again = seed({ DATA_DIR: dataDir });
      assert.equal(again.status, 0, again.stderr);
      assert.equal(readFileSync(file, 'utf8'), '[]', "the user's file is left alone");
      assert.equal(again.stderr, '');
      const chosen = join(dir, 'elsewhere');
      assert.equal(seed({ DATA_DIR: chosen, PROVIDERS_FILE: join(dir, 'mine.json') }).status, 0);
      assert.equal(existsSync(chosen), false);
    } finally {
      removeDir(dir);
    }
  });

  test('[D-docs-10] npm start makes data/providers.json 0600, whatever the mode of the example it copies', () => {
    const dir = tempDir();
    try {
      const file = join(dir, 'data', 'providers.json');
      const r = seed({ DATA_DIR: join(dir, 'data') });
      assert.equal(r.status, 0, r.stderr);
      assert.equal(statSync(file).mode & 0o777, 0o600);
      assert.equal(readFileSync(file, 'utf8'), readFileSync(EXAMPLE_PROVIDERS, 'utf8'));
      assert.match(r.stderr, /mode 600/);
    } finally {
      removeDir(dir);
    }
  });

  test('[D-docs-9] data/ is ignored by git as a whole: providers, secret and database never show in git status', (t) => {
    const inRepo = spawnSync('git', ['rev-parse', '--is-inside-work-tree'], { cwd: ROOT, encoding: 'utf8' });
    if (inRepo.status !== 0) {
      console.log('# SKIPPED: not a git checkout (or no git): the .gitignore rule for data/ is not checked');
      t.skip('not a git checkout');
      return;
    }
    const files = ['data/providers.json', 'data/auth-secret', 'data/chat-sessions.db', 'data/chat-sessions.db-wal', 'data/lock', 'data/sessions.journal.migrated'];
    const r = spawnSync('git', ['check-ignore', '--no-index', ...files], { cwd: ROOT, encoding: 'utf8' });
    assert.deepEqual(r.stdout.trim().split('\n'), files);
    const tracked = spawnSync('git', ['ls-files', 'data'], { cwd: ROOT, encoding: 'utf8' });
    assert.equal(tracked.stdout, '', 'nothing under data/ is tracked');
  });

  test('[D-docs-9] the tests use their own providers file: editing the example or data/ changes no test', () => {
    const helpers = readFileSync(join(ROOT, 'test', 'helpers.mjs'), 'utf8');
    assert.match(helpers, /copyFileSync\(TEST_PROVIDERS, join\(dataDir, 'providers\.json'\)\)/, 'the harness default');
    assert.equal(TEST_PROVIDERS, join(ROOT, 'test', 'fixtures', 'providers.json'));
    const repoData = new RegExp(['ROOT', "'data'"].join(', '));
    for (const f of readdirSync(join(ROOT, 'test')).filter((n) => n.endsWith('.mjs'))) {
      assert.doesNotMatch(readFileSync(join(ROOT, 'test', f), 'utf8'), repoData, `${f} reads the repository's data/`);
    }
  });
});

test('[D-docs-11] LICENSE holds the license package.json names; .gitignore names no missing file', () => {
  const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8'));
  assert.equal(pkg.license, 'MIT');
  const license = readFileSync(join(ROOT, 'LICENSE'), 'utf8');
  assert.match(license, /^MIT License\n\nCopyright \(c\) \d{4} /);
  assert.match(license, /THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND/);
  const ignore = readFileSync(join(ROOT, '.gitignore'), 'utf8');
  assert.doesNotMatch(ignore, /README/);
  for (const line of ignore.split('\n')) {
    if (line.startsWith('!')) assert.ok(existsSync(join(ROOT, line.slice(1))), `.gitignore keeps ${line.slice(1)}, which does not exist`);
  }
});
