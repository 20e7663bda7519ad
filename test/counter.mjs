// A node:test reporter beside the spec one: it keeps a pass's totals (node's own summary of the
// whole run, the one without a file) and the number of files, as JSON for run.mjs's summary lines,
// with every test or suite name longer than docs/development.md allows (120 characters) as it
// ran: test/once/docs.test.mjs reads the names written in the files, this holds those built
// while the tests run (a template's values, a subtest's name).
const LONGEST_NAME = 120;

export default async function* counter(source) {
  const files = new Set();
  const long = new Set();
  let total;
  for await (const event of source) {
    if ((event.type === 'test:pass' || event.type === 'test:fail') && event.data.name.length > LONGEST_NAME) long.add(event.data.name);
    if (event.type !== 'test:summary') continue;
    if (event.data.file !== undefined) files.add(event.data.file);
    else total = event.data.counts;
  }
  if (total === undefined) return;
  yield `${JSON.stringify({ pass: total.passed, fail: total.failed + total.cancelled, skip: total.skipped + total.todo, files: files.size, long: [...long] })}\n`;
}
