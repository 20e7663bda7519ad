// `npm start` on a fresh clone: copies the example providers (examples/providers.json) to
// $DATA_DIR/providers.json (default ./data) when no providers file is there yet, so the
// server has something to list. A file already there is the user's and is never touched;
// data/ is ignored by git, so editing it never shows in `git status`. With PROVIDERS_FILE
// set, the user chose a file: nothing is copied. The copy is made 0600, as it will hold API
// keys: a copy of the checked-out example would take its mode, readable by everyone.
import { closeSync, mkdirSync, openSync, readFileSync, unlinkSync, writeSync } from 'node:fs';
import { join, resolve } from 'node:path';

const example = new URL('../examples/providers.json', import.meta.url);
if ((process.env.PROVIDERS_FILE ?? '').trim() === '') {
  const dataDir = resolve((process.env.DATA_DIR ?? '').trim() || 'data');
  const target = join(dataDir, 'providers.json');
  mkdirSync(dataDir, { recursive: true });
  let fd;
  try {
    fd = openSync(target, 'wx', 0o600);
  } catch (e) {
    if (e.code !== 'EEXIST') throw e;
  }
  if (fd !== undefined) {
    try {
      writeSync(fd, readFileSync(example));
      closeSync(fd);
    } catch (e) {
      // half a file would be kept as the user's from now on: none is better
      closeSync(fd);
      unlinkSync(target);
      throw e;
    }
    process.stderr.write(`copied the example providers to ${target} (mode 600: it holds API keys); edit it to list yours\n`);
  }
}
