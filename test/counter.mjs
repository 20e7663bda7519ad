// A node:test reporter beside the spec one: it keeps a pass's totals (node's own summary of the
// whole run, the one without a file) and the number of files, as JSON for run.mjs's summary lines.
export default async function* counter(source) {
  const files = new Set();
  let total;
  for await (const event of source) {
    if (event.type !== 'test:summary') continue;
    if (event.data.file !== undefined) files.add(event.data.file);
    else total = event.data.counts;
  }
  if (total === undefined) return;
  yield `${JSON.stringify({ pass: total.passed, fail: total.failed + total.cancelled, skip: total.skipped + total.todo, files: files.size })}\n`;
}
