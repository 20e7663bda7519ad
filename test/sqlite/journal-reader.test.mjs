// The retired journal's reader keeps the checks the engine made (DECISIONS "Storage engines":
// "the format's checks stay"): an interrupted final write is dropped with a warning, damage
// anywhere else stops with a message naming the file, the line and the byte offset and saying
// what to do, and nothing is changed. Driven through `export`, which reads a journal that was
// never migrated as it is, and through the start, which migrates it.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { removeDir, runCli, SECRET, STORE, tempDir } from '../helpers.mjs';

const CLEAN = readFileSync(fileURLToPath(new URL('../fixtures/journal/clean/sessions.journal', import.meta.url)));
const sqliteOnly = { skip: STORE !== 'sqlite' && 'a journal is read on sqlite (with STORE=postgres the directory is refused)' };

/** A data directory holding `bytes` as its journal. */
function journalDir(bytes) {
  const dir = tempDir('csa-reader-');
  writeFileSync(join(dir, 'sessions.journal'), bytes);
  return dir;
}

/** `export` of a journal made of `bytes`: exit code, the records (header line left out), stderr, and whether the file is as it was. */
function exported(bytes) {
  const dir = journalDir(bytes);
  try {
    const r = runCli(['export'], { env: { DATA_DIR: dir } });
    return { code: r.code, records: r.stdout.split('\n').slice(1).join('\n'), stderr: r.stderr, untouched: readFileSync(join(dir, 'sessions.journal')).equals(bytes) && readdirSync(dir).length === 1 };
  } finally {
    removeDir(dir);
  }
}

/** The start of line `n` (1-based). */
function lineStart(buf, n) {
  let at = 0;
  for (let i = 1; i < n; i++) at = buf.indexOf(0x0a, at) + 1;
  return at;
}

describe('The journal reader: torn final writes', sqliteOnly, () => {
  test('[D-journal-8] a last record cut at any byte reads as the journal without it, with a warning of the bytes', () => {
    const lastStart = CLEAN.lastIndexOf(0x0a, CLEAN.length - 2) + 1;
    const lastLen = CLEAN.length - lastStart;
    const without = exported(CLEAN.subarray(0, lastStart));
    const whole = exported(CLEAN);
    assert.equal(whole.code, 0, whole.stderr);
    assert.notEqual(without.records, whole.records, 'the last record changes what is read');
    for (const k of [1, 9, 10, Math.floor(lastLen / 2), lastLen - 2, lastLen - 1]) {
      const r = exported(CLEAN.subarray(0, lastStart + k));
      assert.equal(r.code, 0, r.stderr);
      assert.equal(r.records, without.records, `offset ${k}: the torn record is dropped, the rest intact`);
      const warn = r.stderr.split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l)).find((l) => /interrupted final write/.test(l.msg));
      assert.equal(warn?.level, 'warn', `offset ${k}`);
      assert.equal(warn.droppedBytes, k, `offset ${k}: says how many bytes were dropped`);
      assert.ok(r.untouched, 'the journal is read, never cut');
    }
  });

  test('a complete last line whose checksum does not match is dropped the same way (nothing intact follows it)', () => {
    const lastStart = CLEAN.lastIndexOf(0x0a, CLEAN.length - 2) + 1;
    const rotten = Buffer.from(CLEAN);
    rotten[lastStart + 20] ^= 0x01;
    const r = exported(rotten);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.records, exported(CLEAN.subarray(0, lastStart)).records);
    assert.match(r.stderr, /interrupted final write/);
  });

  test('a journal whose header write was interrupted (a prefix of it, or zeros) holds nothing: it migrates into an empty store', () => {
    for (const bytes of [Buffer.from('1a2b3c4d {"format":"chat-ses'), Buffer.from('1a2b'), Buffer.alloc(40)]) {
      const r = exported(bytes);
      assert.equal(r.code, 0, `${bytes}: ${r.stderr}`);
      assert.equal(r.records, '', String(bytes));
    }
  });
});

describe('The journal reader: damage that is not a torn tail', sqliteOnly, () => {
  /** The start on a journal damaged by `mutate`: its exit, stderr and whether the directory is as it was. */
  function refused(mutate) {
    const damaged = mutate(Buffer.from(CLEAN));
    const dir = journalDir(damaged);
    try {
      const r = runCli([], { env: { DATA_DIR: dir, PORT: '0', AUTH_SECRET: SECRET } });
      return { code: r.code, stderr: r.stderr, untouched: readFileSync(join(dir, 'sessions.journal')).equals(damaged) && readdirSync(dir).filter((f) => f !== 'lock').length === 1 };
    } finally {
      removeDir(dir);
    }
  }

  test('[D-journal-8] a checksum mismatch mid-file stops the start naming file, line and offset; nothing is changed', () => {
    const offset = lineStart(CLEAN, 3);
    const r = refused((buf) => {
      buf[offset + 30] ^= 0x01;
      return buf;
    });
    assert.equal(r.code, 1);
    assert.match(r.stderr, new RegExp(`sessions\\.journal: damaged record at line 3 \\(byte offset ${offset}\\): checksum mismatch`));
    assert.match(r.stderr, /98 more line\(s\) follow it \(98 intact\)/);
    assert.match(r.stderr, /import/);
    assert.match(r.stderr, new RegExp(`truncate -s ${offset}`));
    assert.ok(r.untouched, 'no database made, the journal as it was');
  });

  test('a broken line (not JSON, not a journal line) in the middle stops the start', () => {
    const r = refused((buf) => {
      const at = lineStart(buf, 2);
      return Buffer.concat([buf.subarray(0, at), Buffer.from('this is not a record\n'), buf.subarray(at)]);
    });
    assert.equal(r.code, 1);
    assert.match(r.stderr, /damaged record at line 2 .*not a journal line/);
    assert.ok(r.untouched);
  });

  test('a lost newline that merges two records in the middle stops the start', () => {
    const r = refused((buf) => {
      const nl = lineStart(buf, 3) - 1;
      return Buffer.concat([buf.subarray(0, nl), buf.subarray(nl + 1)]);
    });
    assert.equal(r.code, 1);
    assert.match(r.stderr, /damaged record at line 2/);
    assert.ok(r.untouched);
  });

  test('[D-journal-9] a damaged header with records after it stops the start, never suggesting to cut the file there', () => {
    const r = refused((buf) => {
      buf[12] = 'X'.charCodeAt(0);
      return buf;
    });
    assert.equal(r.code, 1);
    assert.match(r.stderr, /damaged record at line 1 \(byte offset 0\)/);
    assert.doesNotMatch(r.stderr, /truncate/);
    assert.match(r.stderr, /restore from a backup/);
  });

  test('[D-journal-9] a journal with CRLF line ends stops the start saying how to convert it; converted, it migrates', () => {
    const crlf = Buffer.from(CLEAN.toString('latin1').replace(/\n/g, '\r\n'), 'latin1');
    const dir = journalDir(crlf);
    try {
      const r = runCli([], { env: { DATA_DIR: dir, PORT: '0', AUTH_SECRET: SECRET } });
      assert.equal(r.code, 1);
      const lines = r.stderr.split('\n').filter((l) => l !== '');
      assert.equal(lines.length, 1, r.stderr);
      assert.match(lines[0], /sessions\.journal: the journal has Windows line endings \(CRLF\).*its records are intact\. Nothing was changed\./);
      assert.doesNotMatch(r.stderr, /truncate/);
      assert.ok(readFileSync(join(dir, 'sessions.journal')).equals(crlf), 'the journal was not modified');
      // the advice, as given
      const command = /`(sed -i [^`]+)`/.exec(lines[0])[1];
      assert.equal(spawnSync('bash', ['-c', command], { cwd: dir }).status, 0, command);
      const e = runCli(['export'], { env: { DATA_DIR: dir } });
      assert.equal(e.code, 0, e.stderr);
      assert.equal(e.stdout.split('\n').slice(1).join('\n'), exported(CLEAN).records);
    } finally {
      removeDir(dir);
    }
  });

  test('a file that is not a journal at all stops the start (and is left as it is), one line or many, with or without a newline', () => {
    for (const bytes of ['{"some":"json"}\n{"other":1}\n', `${JSON.stringify({ big: 'x'.repeat(30_000) })}\n`, 'some other file without a newline']) {
      const r = refused(() => Buffer.from(bytes));
      assert.equal(r.code, 1, bytes.slice(0, 40));
      assert.match(r.stderr, /sessions\.journal: damaged record at line 1 \(byte offset 0\)/);
      assert.ok(r.untouched);
    }
  });

  test('two damaged lines at the end are more than one interrupted write: the start stops', () => {
    const r = refused((buf) => Buffer.concat([buf, Buffer.from('garbage one\ngarbage two\n')]));
    assert.equal(r.code, 1);
    assert.match(r.stderr, /1 more line\(s\) follow it \(0 intact\)/);
    assert.ok(r.untouched);
  });
});
