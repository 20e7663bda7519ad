// A process that appends deltas to a streaming turn one after another, printing each as it is
// acknowledged, until it is killed: the deltas contract's SIGKILL case starts it and kills it.
//   node child-delta-writer.mjs <engine> <dir> <round>
import { openOn, kit } from './engines.mjs';

const [engine, dir, round] = process.argv.slice(2);
const store = await openOn(engine, dir);
const base = Date.UTC(2100, 8, 1) + Number(round) * 1_000_000;
const out = (m) => process.stdout.write(`${JSON.stringify(m)}\n`);
const s = await store.createSession(
  kit.chatSession({ _id: kit.newObjectId(base), name: `deltas ${round}`, provider: 'p', selectedModel: 'm', mode: 'Build', user: 'alice', project: 'proj', createdAt: new Date(base).toISOString(), updatedAt: new Date(base).toISOString(), archived: false }),
);
const id = s.session._id;
const t = await store.appendTurn(id, { _id: kit.newObjectId(base + 10), parentId: null, user: 'alice', role: 'assistant', content: '', status: 'streaming', createdAt: new Date(base + 10).toISOString() });
out({ turn: t._id, session: id });
for (let i = 0; ; i++) {
  const text = `d${i} ${'é'.repeat(i % 5)}`;
  await store.appendDelta(id, t._id, [{ kind: 'text', text }], 10_000_000);
  out({ acked: text });
}
