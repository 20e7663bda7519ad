// The store contract (cases.mjs), run in-process against the engine of this run of the suite:
// test/run.mjs runs the suite once per engine, each on the Node.js it needs.
import { after } from 'node:test';
import { STORE } from '../helpers.mjs';
import { contract } from './cases.mjs';
import { treeContract } from './tree-cases.mjs';
import { findingContract } from './finding-cases.mjs';
import { searchContract } from './search-cases.mjs';
import { deltaContract } from './delta-cases.mjs';
import { doorIndexContract } from './door-index-cases.mjs';

after(contract(STORE));
after(treeContract(STORE));
after(findingContract(STORE));
after(searchContract(STORE));
after(deltaContract(STORE));
after(doorIndexContract(STORE));
