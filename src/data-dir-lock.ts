// One server per data directory: a lock file holding the owner's pid, host and start time.
// A lock whose process is gone (or is this very process, as after a container restart with
// the same pid) is stale and taken over; a live one stops the start naming its holder.
// Deciding that a lock is stale and replacing it are two steps, so on Linux a starter first
// binds an abstract unix socket named after the directory (guardDataDir): the kernel lets one
// process at a time hold that name and frees it when the process dies, so only one starter
// can be between those steps.
import { closeSync, mkdirSync, openSync, readFileSync, statSync, unlinkSync, writeSync, fsyncSync, existsSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { hostname } from 'node:os';
import { join } from 'node:path';

export const LOCK_FILE = 'lock';

interface LockInfo {
  readonly pid: number;
  readonly host: string;
  readonly startedAt: string;
  /** Process start time from /proc (Linux), to tell a reused pid from the real holder. */
  readonly procStart?: string;
}

export class DataDirLocked extends Error {
  override readonly name = 'DataDirLocked';
}

function procStartOf(pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // fields after the parenthesised command name; starttime is field 22 overall
    const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return rest[19];
  } catch {
    return undefined;
  }
}

function isAlive(info: LockInfo): boolean {
  if (info.pid === process.pid) return false;
  try {
    process.kill(info.pid, 0);
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
  if (info.procStart !== undefined) {
    const now = procStartOf(info.pid);
    if (now !== undefined && now !== info.procStart) return false;
  }
  return true;
}

function readLock(path: string): LockInfo | undefined {
  try {
    const v: unknown = JSON.parse(readFileSync(path, 'utf8'));
    if (typeof v === 'object' && v !== null && typeof (v as LockInfo).pid === 'number') return v as LockInfo;
  } catch {
    // unreadable or half-written lock: treated as stale below
  }
  return undefined;
}

/** The live process holding the data directory's lock, if any (a stale lock has none). */
export function lockHolder(dir: string): { pid: number; startedAt: string } | undefined {
  const info = readLock(join(dir, LOCK_FILE));
  if (info === undefined || info.host !== hostname()) return info;
  return isAlive(info) ? info : undefined;
}

export interface Lock {
  release(): void;
  /** Set when a stale lock was taken over. */
  readonly tookOver?: LockInfo | undefined;
}

/** Takes the data directory's lock or throws DataDirLocked naming the process that holds it. */
export function acquireLock(dir: string): Lock {
  const path = join(dir, LOCK_FILE);
  const me: LockInfo = {
    pid: process.pid,
    host: hostname(),
    startedAt: new Date().toISOString(),
    ...(procStartOf(process.pid) !== undefined ? { procStart: procStartOf(process.pid) as string } : {}),
  };
  let tookOver: LockInfo | undefined;
  for (let attempt = 0; attempt < 3; attempt++) {
    let fd: number;
    try {
      fd = openSync(path, 'wx', 0o644);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
      const holder = readLock(path);
      if (holder !== undefined && holder.host !== me.host) {
        throw new DataDirLocked(`data directory ${dir} is in use by process ${holder.pid} on host ${holder.host} (since ${holder.startedAt}); if that is wrong, remove ${path}`);
      }
      if (holder !== undefined && isAlive(holder)) {
        throw new DataDirLocked(`data directory ${dir} is in use by process ${holder.pid} (since ${holder.startedAt}); stop that process first`);
      }
      tookOver = holder ?? { pid: 0, host: me.host, startedAt: 'unknown' };
      testPause('lock-takeover');
      try {
        unlinkSync(path);
      } catch {
        // someone else removed it first; the next attempt decides
      }
      continue;
    }
    try {
      writeSync(fd, JSON.stringify(me) + '\n');
      fsyncSync(fd);
    } catch (e) {
      // a full disk: an empty lock left behind would name no holder and read as stale
      closeSync(fd);
      unlinkSync(path);
      throw e;
    }
    closeSync(fd);
    // two starters racing over one stale lock: only one of them reads its own pid back
    if (readLock(path)?.pid !== process.pid) throw new DataDirLocked(`data directory ${dir} was locked by another process starting at the same time`);
    let released = false;
    return {
      tookOver,
      release(): void {
        if (released) return;
        released = true;
        if (readLock(path)?.pid === process.pid) unlinkSync(path);
      },
    };
  }
  throw new DataDirLocked(`could not take the lock ${path}`);
}

/** The abstract socket name that stands for `dir`: its device and inode, whatever path reaches it. */
export function guardName(dir: string): string {
  const st = statSync(dir, { bigint: true });
  return `\0chat-session-api/data-dir/${st.dev}:${st.ino}`;
}

/**
 * Holds the kernel-owned name of `dir` for the life of the process, so that no other process
 * in this network namespace can take over its lock at the same time (see the file's head).
 * Throws DataDirLocked naming the holder when another process has it. Elsewhere than on
 * Linux (no abstract sockets) it does nothing and the lock file alone decides; so it does
 * where the socket cannot be made (a sandbox without AF_UNIX): then it returns the error code.
 */
export async function guardDataDir(dir: string): Promise<string | undefined> {
  if (process.platform !== 'linux') return undefined;
  mkdirSync(dir, { recursive: true });
  const held = await holdName(guardName(dir));
  if (typeof held !== 'string') {
    // held until the process exits; it must not keep a stopping process alive
    held.unref();
    return undefined;
  }
  if (held !== 'EADDRINUSE') return held;
  const holder = readLock(join(dir, LOCK_FILE));
  if (holder !== undefined && holder.host === hostname() && isAlive(holder)) {
    throw new DataDirLocked(`data directory ${dir} is in use by process ${holder.pid} (since ${holder.startedAt}); stop that process first`);
  }
  throw new DataDirLocked(`data directory ${dir} is in use by another process, which its lock file does not name (it is starting or stopping, or the file was removed); stop that process first`);
}

/**
 * Binds the abstract unix socket `name`: the kernel lets one socket at a time hold it and frees
 * it when its process dies. The socket (close it to give the name up), or the error's code
 * (EADDRINUSE: another holds it).
 */
export async function holdName(name: string): Promise<Server | string> {
  const server: Server = createServer((socket) => socket.destroy());
  try {
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen({ path: name }, () => {
        server.off('error', reject);
        resolve();
      });
    });
  } catch (e) {
    return (e as NodeJS.ErrnoException).code ?? 'unknown';
  }
  return server;
}

/**
 * Test-only: with CHAT_SESSION_API_PAUSE=<step>:<dir>, reaching <step> writes <dir>/paused-<pid>
 * and waits (at most a minute) for <dir>/resume, so a test can hold a starter between two steps.
 */
function testPause(step: string): void {
  const spec = process.env['CHAT_SESSION_API_PAUSE'];
  if (spec === undefined || !spec.startsWith(`${step}:`)) return;
  const dir = spec.slice(step.length + 1);
  writeFileSync(join(dir, `paused-${process.pid}`), step);
  const cell = new Int32Array(new SharedArrayBuffer(4));
  for (let waited = 0; waited < 60_000 && !existsSync(join(dir, 'resume')); waited += 20) Atomics.wait(cell, 0, 0, 20);
}
