// `npm start` on a fresh clone: copies the example providers (examples/providers.json) to
// $DATA_DIR/providers.json (default ./data) when no providers file is there yet, so the
// server has something to list. A file already there is the user's and is never touched;
// data/ is ignored by git, so editing it never shows in `git status`. With PROVIDERS_FILE
// set, the user chose a file: nothing is copied.
import { constants, copyFileSync, mkdirSync } from 'node:fs';
import { join, resolve } from 'node:path';

const example = new URL('../examples/providers.json', import.meta.url);
if ((process.env.PROVIDERS_FILE ?? '').trim() === '') {
  const dataDir = resolve((process.env.DATA_DIR ?? '').trim() || 'data');
  const target = join(dataDir, 'providers.json');
  mkdirSync(dataDir, { recursive: true });
  try {
    copyFileSync(example, target, constants.COPYFILE_EXCL);
    process.stderr.write(`copied the example providers to ${target}; edit it to list yours\n`);
  } catch (e) {
    if (e.code !== 'EEXIST') throw e;
  }
}
