// "No import runs back up a floor and there is no cycle" (issue 29): the house's floors, from
// the request's edge down to the domain, checked over every import of src/ by
// scripts/check-imports.mjs, with what each floor may not know (http/ no store, live/ no HTTP,
// providers/ no envelope, services/ no node:http, one place naming the engines).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { check, FLOORS } from '../scripts/check-imports.mjs';

test('"A reader can follow one request from main.ts to the store and back without a step going up a floor": no import of src/ goes up a floor or breaks a floor\'s rule (so "Use cases take plain inputs": services/ import no node:http, nor the routes above them), and no module imports itself back', () => {
  const r = check();
  assert.deepEqual(r.problems, []);
  assert.ok(r.files > 50 && r.imports > 200, `${r.files} modules, ${r.imports} imports read`);
  assert.equal(new Set(FLOORS.map((f) => f.floor)).size, FLOORS.length, 'each floor once');
});
