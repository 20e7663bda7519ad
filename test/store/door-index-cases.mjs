// The store contract for the OpenAI door's index, run in-process against each engine
// (contract.test.mjs): a turn's path key, written with the turn (appendTurns' pathKeys) or with its
// end (updateTurn's edit), and the sessions by their metadata.conversationKey, each found by the
// owner, live sessions only, the most recently updated first.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { kit, openOn } from './engines.mjs';

const { chatSession, newObjectId } = kit;

const BASE = Date.UTC(2100, 8, 1);
const at = (ms) => new Date(BASE + ms).toISOString();
/** Liveness now (the fixed instant), no retention. */
const LIVE = { now: at(0), cutoff: undefined };

let idClock = 0;
const session = (over = {}) =>
  chatSession({ _id: newObjectId(BASE + idClock++ * 1000), name: 'door', provider: 'p', selectedModel: 'm', mode: 'Build', user: 'alice', project: 'proj', createdAt: at(0), updatedAt: at(0), archived: false, ...over });

let turnClock = 0;
/** Turns for appendTurns: the first under the head, each next under the one before, newer each time. */
const chain = (roles) =>
  roles.map((role) => {
    const ms = 10 + turnClock++ * 1000;
    return { _id: newObjectId(BASE + ms), user: 'alice', role, content: `${role} ${ms}`, status: 'complete', createdAt: at(ms) };
  });

export function doorIndexContract(engine) {
  const dirs = [];
  const withStore = async (fn) => {
    const dir = mkdtempSync(join(tmpdir(), `csa-door-${engine}-`));
    dirs.push(dir);
    const store = await openOn(engine, dir);
    try {
      return await fn(store);
    } finally {
      await store.close();
    }
  };

  describe(`Store contract, the OpenAI door's index: ${engine}`, () => {
    test('[D-door-14] a path key written with a turn is found for its owner, the most recently updated session first', async () => {
      await withStore(async (store) => {
        const a = (await store.createSession(session())).session._id;
        const b = (await store.createSession(session())).session._id;
        const c = (await store.createSession(session({ user: 'bob' }))).session._id;
        const [, ta] = await store.appendTurns(a, chain(['user', 'assistant']), { pathKeys: [undefined, 'key-1'] });
        const [, tb] = await store.appendTurns(b, chain(['user', 'assistant']), { pathKeys: [undefined, 'key-1'] });
        await store.appendTurns(c, chain(['user', 'assistant']), { pathKeys: [undefined, 'key-1'] });
        assert.deepEqual(await store.turnsByPathKey('alice', 'key-1', LIVE, 10), [{ session: b, turn: tb._id }, { session: a, turn: ta._id }], 'newest first, alice\'s only');
        assert.deepEqual(await store.turnsByPathKey('alice', 'key-1', LIVE, 1), [{ session: b, turn: tb._id }], 'at most the limit');
        assert.deepEqual(await store.turnsByPathKey('alice', 'key-2', LIVE, 10), []);
        // a later write to a moves it to the front
        await store.appendTurns(a, chain(['user']), {});
        assert.deepEqual((await store.turnsByPathKey('alice', 'key-1', LIVE, 10)).map((x) => x.session), [a, b]);
      });
    });

    test('[D-door-14] a reply\'s end writes its path key; an edit of its content clears it; deletes take it', async () => {
      await withStore(async (store) => {
        const s = (await store.createSession(session())).session._id;
        const [, reply] = await store.appendTurns(s, chain(['user', 'assistant']), {});
        assert.deepEqual(await store.turnsByPathKey('alice', 'end-key', LIVE, 10), []);
        await store.updateTurn(s, reply._id, { status: 'complete', pathKey: 'end-key' });
        assert.deepEqual(await store.turnsByPathKey('alice', 'end-key', LIVE, 10), [{ session: s, turn: reply._id }]);
        await store.updateTurn(s, reply._id, { metadata: { note: 'kept' } });
        assert.equal((await store.turnsByPathKey('alice', 'end-key', LIVE, 10)).length, 1, 'an edit of anything else keeps it');
        await store.updateTurn(s, reply._id, { content: 'rewritten' });
        assert.deepEqual(await store.turnsByPathKey('alice', 'end-key', LIVE, 10), [], 'its content changed: the path it was found by is gone');
        const [, other] = await store.appendTurns(s, chain(['user', 'assistant']), { pathKeys: [undefined, 'gone-key'] });
        await store.deleteTurn(s, other._id);
        assert.deepEqual(await store.turnsByPathKey('alice', 'gone-key', LIVE, 10), []);
        await store.appendTurns(s, chain(['assistant']), { pathKeys: ['session-key'] });
        await store.deleteSession(s);
        assert.deepEqual(await store.turnsByPathKey('alice', 'session-key', LIVE, 10), []);
      });
    });

    test('[D-door-15] a session is found by its metadata.conversationKey, its owner\'s, live, the most recently updated', async () => {
      await withStore(async (store) => {
        const a = (await store.createSession(session({ metadata: { conversationKey: 'chat-1' } }))).session._id;
        assert.equal(await store.sessionByConversationKey('alice', 'chat-1', LIVE), a);
        assert.equal(await store.sessionByConversationKey('bob', 'chat-1', LIVE), undefined);
        assert.equal(await store.sessionByConversationKey('alice', 'chat-2', LIVE), undefined);
        const b = (await store.createSession(session({ metadata: { conversationKey: 'chat-1', other: 'x' } }))).session._id;
        await store.appendTurns(b, chain(['user']), {});
        assert.equal(await store.sessionByConversationKey('alice', 'chat-1', LIVE), b, 'the most recently updated');
        // its metadata changed: the key goes with it
        await store.updateSession(b, { metadata: { other: 'x' } }, { now: BASE + 500_000 });
        assert.equal(await store.sessionByConversationKey('alice', 'chat-1', LIVE), a);
        // an expired session is gone for it
        await store.updateSession(a, { expiresAt: at(-1) }, { now: BASE + 600_000 });
        assert.equal(await store.sessionByConversationKey('alice', 'chat-1', LIVE), undefined);
      });
    });

    test('done', () => {
      for (const d of dirs) rmSync(d, { recursive: true, force: true });
    });
  });
}
