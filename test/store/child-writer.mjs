// A process that writes to a store one acknowledged write after another, printing each as it is
// acknowledged, until it is killed: the contract's SIGKILL case starts it and kills it.
//   node child-writer.mjs <engine> <dir> <round>
import { openOn, kit } from './engines.mjs';

const [engine, dir, round] = process.argv.slice(2);
const store = await openOn(engine, dir);
const base = Date.UTC(2026, 0, 1) + Number(round) * 1_000_000;
const ids = [];
for (let i = 0; ; i++) {
  const at = new Date(base + i * 10).toISOString();
  if (ids.length === 0 || i % 3 === 0) {
    const s = await store.createSession(
      kit.chatSession({ _id: kit.newObjectId(base + i * 10), name: `r${round} s${i}`, provider: 'p', selectedModel: 'm', mode: 'Build', user: 'alice', project: 'proj', createdAt: at, updatedAt: at, archived: false }),
    );
    ids.push(s.session._id);
    process.stdout.write(`${JSON.stringify({ created: s.session._id })}\n`);
  } else {
    const id = ids[i % ids.length];
    // stamped at the serial point: never before its session's newest turn
    const t = await store.appendTurn(id, { user: 'alice', role: 'user', content: `turn ${i} ${'x'.repeat(i % 300)}` });
    process.stdout.write(`${JSON.stringify({ turn: id, _id: t._id })}\n`);
  }
}
