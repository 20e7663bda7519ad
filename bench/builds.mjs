// Another commit's dist/server.js, for the engine scenarios' `--before=REF` row, pg-quota's
// `--quota-base` and the `builds` scenario: a load against the build before a change, in the
// same interleaved rounds (a ratio between two runs on a shared machine says little).
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { NODE_24, ROOT } from './common.mjs';

const git = (...args) => execFileSync('git', ['-C', ROOT, ...args], { encoding: 'utf8' }).trim();

/** The short name of `ref`'s commit (throws on an unknown ref). */
export function commitOf(ref) {
  try {
    return git('rev-parse', '--verify', `${ref}^{commit}`);
  } catch (e) {
    throw new Error(`--before=${ref}: not a commit of this repository (${e.message.split('\n')[0]})`);
  }
}

/**
 * dist/server.js of `commit`, built once into $TMPDIR/csa-bench-build-<commit> from `git archive`
 * (nothing is registered in the repository) and kept for the next run (rm -rf
 * $TMPDIR/csa-bench-build-* drops it). Its node_modules are this checkout's when the two lock
 * files are the same (no registry needed), else its own `npm ci`.
 */
export function buildOf(commit, progress) {
  const dir = join(tmpdir(), `csa-bench-build-${commit.slice(0, 12)}`);
  const server = join(dir, 'dist', 'server.js');
  if (existsSync(server)) {
    progress(`reusing the build of ${commit.slice(0, 7)} in ${dir}`);
    return server;
  }
  progress(`building ${commit.slice(0, 7)} in ${dir} (git archive, node build.mjs)...`);
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  try {
    const tar = execFileSync('git', ['-C', ROOT, 'archive', '--format=tar', commit], { maxBuffer: 1 << 30 });
    execFileSync('tar', ['-x', '-C', dir], { input: tar });
    const sameLock = readFileSync(join(dir, 'package-lock.json'), 'utf8') === readFileSync(join(ROOT, 'package-lock.json'), 'utf8');
    if (sameLock) symlinkSync(join(ROOT, 'node_modules'), join(dir, 'node_modules'), 'dir');
    else execFileSync('npm', ['ci', '--no-audit', '--no-fund', '--loglevel=error'], { cwd: dir, stdio: ['ignore', 2, 2] });
    execFileSync(NODE_24, ['build.mjs'], { cwd: dir, stdio: ['ignore', 2, 2] });
  } catch (e) {
    rmSync(dir, { recursive: true, force: true });
    throw new Error(`building ${commit.slice(0, 7)} failed: ${e.message.split('\n')[0]}`);
  }
  return server;
}
