// The nginx block of docs/operating.md is a configuration nginx accepts (docs/DECISIONS.md, "The
// documents"): it is cut out of the document and checked with `nginx -t` inside a minimal main
// configuration, with a self-signed certificate made for the test in place of the document's.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { findExecutable, removeDir, ROOT, tempDir } from '../helpers.mjs';

test("[D-docs-8] the nginx block of docs/operating.md passes nginx -t on Debian 12's nginx 1.22", (t) => {
  const nginx = findExecutable('nginx', ['/usr/sbin', '/sbin']);
  const openssl = findExecutable('openssl');
  if (nginx === undefined || openssl === undefined) {
    if (process.env.REQUIRE_NGINX === '1') throw new Error(`REQUIRE_NGINX=1 but ${nginx === undefined ? 'nginx' : 'openssl'} is not installed (apt-get install nginx openssl)`);
    console.log(`# SKIPPED: no ${nginx === undefined ? 'nginx' : 'openssl'} on this machine (apt-get install nginx openssl); the nginx block of docs/operating.md was not checked`);
    t.skip('no nginx');
    return;
  }
  const doc = readFileSync(join(ROOT, 'docs', 'operating.md'), 'utf8');
  const blocks = [...doc.matchAll(/^```nginx\n([\s\S]*?)^```$/gm)].map((m) => m[1]);
  assert.equal(blocks.length, 1, 'one nginx block in docs/operating.md');
  const site = blocks[0];
  assert.doesNotMatch(site, /^\s*http2 on;/m, 'http2 on; needs nginx 1.25.1');
  assert.match(site, /ssl_certificate\s+\S+;/);
  assert.match(site, /ssl_certificate_key\s+\S+;/);

  const dir = tempDir('csa-nginx-');
  try {
    const crt = join(dir, 'chat-api.crt');
    const key = join(dir, 'chat-api.key');
    const made = spawnSync(openssl, ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '2', '-subj', '/CN=chat-api.example.internal', '-keyout', key, '-out', crt], { encoding: 'utf8' });
    assert.equal(made.status, 0, made.stderr);
    writeFileSync(join(dir, 'site.conf'), site.replace(/ssl_certificate(\s+)\S+;/, `ssl_certificate$1${crt};`).replace(/ssl_certificate_key(\s+)\S+;/, `ssl_certificate_key$1${key};`));
    for (const d of ['body', 'proxy', 'fastcgi', 'uwsgi', 'scgi']) mkdirSync(join(dir, d));
    // what /etc/nginx/nginx.conf gives a site in conf.d/: an http block around it
    writeFileSync(
      join(dir, 'nginx.conf'),
      `pid ${dir}/nginx.pid;\nerror_log ${dir}/error.log;\nevents {}\nhttp {\n  access_log off;\n` +
        `  client_body_temp_path ${dir}/body; proxy_temp_path ${dir}/proxy; fastcgi_temp_path ${dir}/fastcgi; uwsgi_temp_path ${dir}/uwsgi; scgi_temp_path ${dir}/scgi;\n` +
        `  include ${dir}/site.conf;\n}\n`,
    );
    const version = spawnSync(nginx, ['-v'], { encoding: 'utf8' }).stderr.trim();
    const r = spawnSync(nginx, ['-t', '-p', `${dir}/`, '-e', `${dir}/error.log`, '-c', join(dir, 'nginx.conf')], { encoding: 'utf8' });
    assert.equal(r.status, 0, `${version}: ${r.stderr}`);
    assert.match(r.stderr, /test is successful/);
    assert.doesNotMatch(r.stderr, /\[emerg\]/);
  } finally {
    removeDir(dir);
  }
});
