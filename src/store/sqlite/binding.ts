// The part of `node:sqlite` this engine uses, typed here (the project type-checks against
// Node 20's types, which have no node:sqlite), and loaded only when STORE=sqlite asks for it,
// so the same file still runs on a Node without it.
import type { Dialect } from '../sql.js';
import { StoreOpenFailed } from '../store.js';

export type SqlValue = null | number | bigint | string | Uint8Array;
export type Row = Readonly<Record<string, SqlValue>>;

export interface Statement {
  run(...params: SqlValue[]): { readonly changes: number | bigint; readonly lastInsertRowid: number | bigint };
  get(...params: SqlValue[]): Row | undefined;
  all(...params: SqlValue[]): Row[];
  /** Rows one at a time; `return()` (a `break` out of for...of) resets the statement. */
  iterate(...params: SqlValue[]): IterableIterator<Row>;
}

export interface Database {
  exec(sql: string): void;
  prepare(sql: string): Statement;
  /** Makes a JavaScript function callable from SQL on this connection. */
  function(name: string, options: { readonly deterministic?: boolean }, fn: (...args: SqlValue[]) => SqlValue): void;
  close(): void;
}

interface DatabaseOptions {
  readonly readOnly?: boolean;
  /** Busy timeout in milliseconds. */
  readonly timeout?: number;
}

type DatabaseConstructor = new (path: string, options?: DatabaseOptions) => Database;

export const NODE_FOR_SQLITE = '22.13';

/** The DatabaseSync class of node:sqlite, or a StoreOpenFailed naming the Node.js release it needs. */
export function sqliteDatabase(): DatabaseConstructor {
  const getBuiltin = (process as { getBuiltinModule?: (id: string) => unknown }).getBuiltinModule;
  const mod = getBuiltin?.call(process, 'node:sqlite') as { DatabaseSync?: DatabaseConstructor } | undefined;
  if (mod?.DatabaseSync === undefined) {
    throw new StoreOpenFailed(`STORE=sqlite needs Node.js ${NODE_FOR_SQLITE} or newer (24 LTS recommended); this is Node.js ${process.version}`);
  }
  return mod.DatabaseSync;
}

/** The SQLite result code of an error node:sqlite threw (SQLITE_NOTADB is 26, SQLITE_CORRUPT 11), if it has one. */
export function sqliteCode(e: unknown): number | undefined {
  const code = (e as { errcode?: unknown }).errcode;
  return typeof code === 'number' ? code & 0xff : undefined;
}

/** A BLOB column as a Buffer over the same memory (no copy). */
export function bytesOf(v: SqlValue | undefined): Buffer {
  if (v instanceof Uint8Array) return Buffer.from(v.buffer, v.byteOffset, v.byteLength);
  if (typeof v === 'string') return Buffer.from(v);
  throw new Error('expected a BLOB column');
}

export function text(v: SqlValue | undefined): string {
  if (typeof v !== 'string') throw new Error('expected a TEXT column');
  return v;
}

export function textOrUndefined(v: SqlValue | undefined): string | undefined {
  return typeof v === 'string' ? v : undefined;
}

export function int(v: SqlValue | undefined): number {
  if (typeof v === 'number') return v;
  if (typeof v === 'bigint') return Number(v);
  throw new Error('expected an INTEGER column');
}

/** A session's metadata.conversationKey, as its index (schema.ts, step 10) and the door's lookup write it: the same expression, or the index is not used. */
export const CONVERSATION_KEY_SQLITE = "json_extract(CAST(json AS TEXT), '$.metadata.conversationKey')";

/** A statement's dialect (../sql.ts) for sqlite, its values pushed to `params` in text order (`?` is positional). */
export function sqliteDialect(params: SqlValue[]): Dialect {
  return { param: (v) => (params.push(v), '?'), isSet: (c) => `${c} = 1`, yes: '1', table: (n) => n, owner: 'user', bool: (b) => (b ? '1' : '0'), contains: (hay, needle) => `instr(${hay}, ${needle}) > 0`, conversationKey: CONVERSATION_KEY_SQLITE };
}
