// LISTEN / NOTIFY against a real server: notifications arrive with their channel and
// payload; after the server restarts, the listener reconnects, listens again, says so, and
// receives what is notified from then on.
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { after, before, describe, test } from 'node:test';
import { USERS, postgresMissing, startCluster, waitFor } from './cluster.mjs';

const { Listener, Pool, PgError } = createRequire(import.meta.url)('../../dist/testkit.cjs');

const missing = postgresMissing();

describe('PostgreSQL client: LISTEN / NOTIFY', { skip: missing }, () => {
  let cluster;
  let pool;
  const listeners = [];
  /** A listener that records what it is told. */
  const listener = (url = cluster.url(USERS.scram.user)) => {
    const got = { notifications: [], reconnects: 0, errors: [] };
    const l = new Listener(
      url,
      {
        onNotification: (n) => got.notifications.push(n),
        onReconnect: () => got.reconnects++,
        onError: (e) => got.errors.push(e),
      },
      { reconnectMinMs: 50, reconnectMaxMs: 500 },
    );
    listeners.push(l);
    return { l, got };
  };

  before(async () => {
    cluster = await startCluster();
    pool = new Pool(cluster.url(USERS.scram.user), { max: 2 });
  });
  after(async () => {
    await Promise.all(listeners.map((l) => l.close()));
    await pool?.end();
    await cluster?.destroy();
  });

  test('a notification arrives with its channel, payload and the sender pid; other channels are not delivered', async () => {
    const { l, got } = listener();
    await l.listen('Chat Events'); // quoted: case and spaces kept
    assert.equal(l.connected, true);
    const sender = (await pool.query('SELECT pg_backend_pid()')).rows[0][0];
    await pool.query('SELECT pg_notify($1, $2)', ['Chat Events', 'hello — ünïcode 🎉']);
    await pool.query('SELECT pg_notify($1, $2)', ['other', 'not for us']);
    await pool.query('SELECT pg_notify($1, $2)', ['Chat Events', '']);
    await waitFor(() => got.notifications.length >= 2, { what: 'the notifications' });
    assert.equal(got.notifications[0].channel, 'Chat Events');
    assert.equal(got.notifications[0].payload, 'hello — ünïcode 🎉');
    assert.equal(String(got.notifications[0].pid), sender);
    assert.equal(got.notifications[1].payload, '');
    assert.equal(got.notifications.length, 2);
  });

  test('unlisten stops the deliveries of that channel', async () => {
    const { l, got } = listener();
    await l.listen('a');
    await l.listen('b');
    await l.unlisten('a');
    await pool.query("SELECT pg_notify('a', '1'), pg_notify('b', '2')");
    await waitFor(() => got.notifications.length >= 1, { what: 'the notification on b' });
    await pool.query("SELECT pg_notify('b', '3')"); // ordered after the one on a, if a were delivered
    await waitFor(() => got.notifications.length >= 2, { what: 'the second notification on b' });
    assert.deepEqual(got.notifications.map((n) => `${n.channel}${n.payload}`), ['b2', 'b3']);
  });

  test('after a server restart the listener reconnects, listens again, reports it, and receives new notifications', { timeout: 120_000 }, async () => {
    const { l, got } = listener(cluster.url(USERS.scram.user, { sslmode: 'require' }));
    await l.listen('jobs');
    await l.listen('other');
    await pool.query("SELECT pg_notify('jobs', 'before')");
    await waitFor(() => got.notifications.length === 1, { what: 'the notification before the restart' });

    await cluster.restart();
    await waitFor(() => got.reconnects >= 1, { timeoutMs: 60_000, what: 'the listener to report its reconnection' });
    assert.equal(l.connected, true);
    assert.ok(got.errors.length >= 1 && got.errors.every((e) => e instanceof PgError && e.unavailable), got.errors.map((e) => e.message).join('; '));

    // the pool's connections died in the restart too; its next queries open new ones
    await waitFor(() => pool.query("SELECT pg_notify('jobs', 'after'), pg_notify('other', 'too')").then(() => true, () => false), { what: 'the pool to serve again' });
    await waitFor(() => got.notifications.length >= 3, { what: 'notifications after the restart' });
    assert.deepEqual(got.notifications.map((n) => `${n.channel}:${n.payload}`), ['jobs:before', 'jobs:after', 'other:too']);
  });

  test('listen() while the server is down rejects, and the listener keeps trying until it listens', { timeout: 120_000 }, async () => {
    await cluster.stop();
    const { l, got } = listener();
    try {
      const err = await l.listen('late').then(() => undefined, (e) => e);
      assert.ok(err instanceof PgError && err.unavailable, String(err));
      assert.equal(l.connected, false);
    } finally {
      await cluster.start();
    }
    await waitFor(() => got.reconnects >= 1, { timeoutMs: 60_000, what: 'the listener to connect once the server is back' });
    await waitFor(() => pool.query("SELECT pg_notify('late', 'made it')").then(() => true, () => false), { what: 'the pool to serve again' });
    await waitFor(() => got.notifications.length >= 1, { what: 'the notification' });
    assert.equal(got.notifications[0].payload, 'made it');
  });
});
