// A process that makes conversation writes one after another (appends under the head and under
// older turns, edits, deletions of subtrees, forks), printing each as it is acknowledged, until
// it is killed: the conversations contract's SIGKILL case starts it and kills it.
//   node child-tree-writer.mjs <engine> <dir> <round>
import { openOn, kit } from './engines.mjs';

const [engine, dir, round] = process.argv.slice(2);
const store = await openOn(engine, dir);
// ahead of the clock, so a write that moves updatedAt (an edit, a deletion) steps it by a millisecond
const base = Date.UTC(2100, 0, 1) + Number(round) * 1_000_000;
const out = (m) => process.stdout.write(`${JSON.stringify(m)}\n`);
const s = await store.createSession(
  kit.chatSession({ _id: kit.newObjectId(base), name: `tree ${round}`, provider: 'p', selectedModel: 'm', mode: 'Build', user: 'alice', project: 'proj', createdAt: new Date(base).toISOString(), updatedAt: new Date(base).toISOString(), archived: false }),
);
const id = s.session._id;
const made = [];
const edited = new Set();
for (let i = 1; ; i++) {
  const at = new Date(base + i * 10).toISOString();
  const turn = (parentId) => ({ _id: kit.newObjectId(base + i * 10), ...(parentId !== undefined ? { parentId } : {}), user: 'alice', role: 'user', content: `turn ${i}`, status: 'complete', createdAt: at });
  if (i % 5 === 0 && made.length > 2) {
    // a side branch under an older turn, deleted again
    const parent = made[made.length - 3];
    const t = await store.appendTurn(id, turn(parent));
    out({ turn: t._id, session: id });
    out({ deleting: t._id }); // from here it may be gone before its answer
    const gone = await store.deleteTurn(id, t._id);
    out({ deleted: [t._id], head: gone.session.headTurnId });
  } else if (i % 7 === 0) {
    const f = await store.forkSession(id, undefined, { _id: kit.newObjectId(base + i * 10), owner: 'alice', name: `fork ${i}`, at });
    const n = (await store.listTurns(f.session._id, undefined, 1000)).items.length;
    out({ fork: f.session._id, turns: n });
  } else if (i % 3 === 0 && made.length > 0 && !edited.has(made[made.length - 1])) {
    // each turn is edited once at most: what an acknowledged edit wrote is what stays
    const target = made[made.length - 1];
    edited.add(target);
    const content = `edited at ${i}`;
    out({ editing: target, content }); // from here it may be edited before its answer
    await store.updateTurn(id, target, { content });
    out({ edit: target, content });
  } else {
    const t = await store.appendTurn(id, turn(undefined));
    made.push(t._id);
    out({ turn: t._id, session: id });
  }
}
