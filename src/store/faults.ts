// Test-only fault injection, inert unless CHAT_SESSION_API_FAULTS is set. The crash tests use it
// to fail the k-th sqlite or PostgreSQL commit, or to SIGKILL the process at a named step, so
// that recovery is proven against the real binary rather than argued from the code.
//
//   CHAT_SESSION_API_FAULTS="commit:2"            2nd sqlite or postgres transaction fails just before COMMIT (rolled back)
//   CHAT_SESSION_API_FAULTS="commit:*"            every one fails (with EIO, or the code given: commit:*:ENOSPC)
//   CHAT_SESSION_API_FAULTS="crash:migrate-kept"  SIGKILL on reaching that step (crash:<step>:<k> on its k-th time)
//   CHAT_SESSION_API_FAULTS="hold:index"          the sqlite writer leaves what it queues for the search index queued
//   CHAT_SESSION_API_FAULTS="hold:merge"          the sqlite writer never merges its search index when idle
//   CHAT_SESSION_API_FAULTS="hurry:sqlite-check"  the sqlite engine's full check starts at once, not a minute after the start

type FaultKind = 'commit';

interface Plan {
  readonly failAt: Map<FaultKind, Map<number, string>>;
  /** Kinds that fail at every occurrence, with their code. */
  readonly always: Map<FaultKind, string>;
  readonly crashAt: Map<string, number>;
  readonly held: Set<string>;
  readonly hurried: Set<string>;
}

function parse(spec: string | undefined): Plan | undefined {
  if (spec === undefined || spec.trim() === '') return undefined;
  const plan: Plan = { failAt: new Map(), always: new Map(), crashAt: new Map(), held: new Set(), hurried: new Set() };
  for (const item of spec.split(',')) {
    const [kind, arg, extra] = item.trim().split(':');
    if (kind === 'commit' && arg === '*') {
      plan.always.set(kind, extra ?? 'EIO');
    } else if (kind === 'commit') {
      const at = plan.failAt.get(kind) ?? new Map<number, string>();
      at.set(Number(arg), extra ?? 'EIO');
      plan.failAt.set(kind, at);
    } else if (kind === 'crash' && arg !== undefined) {
      plan.crashAt.set(arg, Number(extra ?? '1'));
    } else if (kind === 'hold' && arg !== undefined) {
      plan.held.add(arg);
    } else if (kind === 'hurry' && arg !== undefined) {
      plan.hurried.add(arg);
    }
  }
  return plan;
}

let plan = parse(process.env['CHAT_SESSION_API_FAULTS']);
const counts = new Map<string, number>();

/**
 * Replaces the plan and starts counting afresh: the in-process store tests use it between
 * cases. Threads started afterwards (the sqlite writer) read the new plan from the environment.
 */
export function setFaultPlan(spec: string | undefined): void {
  if (spec === undefined) delete process.env['CHAT_SESSION_API_FAULTS'];
  else process.env['CHAT_SESSION_API_FAULTS'] = spec;
  plan = parse(spec);
  counts.clear();
}

function bump(key: string): number {
  const n = (counts.get(key) ?? 0) + 1;
  counts.set(key, n);
  return n;
}

/** The injected error for this occurrence of a commit, if one is planned. */
export function injectedFault(kind: FaultKind): NodeJS.ErrnoException | undefined {
  if (plan === undefined) return undefined;
  const code = plan.always.get(kind) ?? plan.failAt.get(kind)?.get(bump(kind));
  if (code === undefined) return undefined;
  const err: NodeJS.ErrnoException = new Error(`${code}: injected fault, ${kind}`);
  err.code = code;
  return err;
}

/** Kills the process on the planned occurrence of a named step. */
export function crashpoint(name: string): void {
  if (plan === undefined) return;
  const at = plan.crashAt.get(name);
  if (at !== undefined && bump(`crash:${name}`) === at) process.kill(process.pid, 'SIGKILL');
}

/** Whether a named background step is held back (it does not run while the plan says so). */
export function held(step: string): boolean {
  return plan?.held.has(step) === true;
}

/** Whether a named background step that waits after the start runs at once instead. */
export function hurried(step: string): boolean {
  return plan?.hurried.has(step) === true;
}
