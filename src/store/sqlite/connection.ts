// The sqlite engine's reading connections: statements prepared once each, and what SQLite reports
// as damage while it prepares or runs one turned into the store's StorageDamaged.
import { sqliteCode, sqliteDatabase, type Database, type Row, type SqlValue, type Statement } from './binding.js';
import { registerHoldsFunctions, unreadable } from './schema.js';

/**
 * A connection with its statements prepared once each. What SQLite reports as damage, as it
 * prepares or runs one, goes through `damaged` (the store marks itself damaged and gets a
 * StorageDamaged to throw instead).
 */
export class Connection {
  private readonly statements = new Map<string, Statement>();
  constructor(
    readonly db: Database,
    private readonly damaged: (e: unknown) => unknown,
  ) {}
  prepare(sql: string): Statement {
    let s = this.statements.get(sql);
    if (s === undefined) {
      try {
        s = new Watched(this.db.prepare(sql), this.damaged);
      } catch (e) {
        throw this.damaged(e);
      }
      this.statements.set(sql, s);
    }
    return s;
  }
}

/** A statement whose errors pass through `damaged` (Connection), its rows' too. */
export class Watched implements Statement {
  constructor(
    private readonly s: Statement,
    private readonly damaged: (e: unknown) => unknown,
  ) {}
  run(...params: SqlValue[]): ReturnType<Statement['run']> {
    try {
      return this.s.run(...params);
    } catch (e) {
      throw this.damaged(e);
    }
  }
  get(...params: SqlValue[]): Row | undefined {
    try {
      return this.s.get(...params);
    } catch (e) {
      throw this.damaged(e);
    }
  }
  all(...params: SqlValue[]): Row[] {
    try {
      return this.s.all(...params);
    } catch (e) {
      throw this.damaged(e);
    }
  }
  iterate(...params: SqlValue[]): IterableIterator<Row> {
    try {
      return new WatchedRows(this.s.iterate(...params), this.damaged);
    } catch (e) {
      throw this.damaged(e);
    }
  }
}

export class WatchedRows implements IterableIterator<Row> {
  constructor(
    private readonly rows: IterableIterator<Row>,
    private readonly damaged: (e: unknown) => unknown,
  ) {}
  next(): IteratorResult<Row> {
    try {
      return this.rows.next();
    } catch (e) {
      throw this.damaged(e);
    }
  }
  return(value?: unknown): IteratorResult<Row> {
    return this.rows.return?.(value) ?? { done: true, value: undefined };
  }
  [Symbol.iterator](): IterableIterator<Row> {
    return this;
  }
}

/** SQLITE_CORRUPT or SQLITE_NOTADB: SQLite found the file malformed. */
export function isDamage(e: unknown): boolean {
  const code = sqliteCode(e);
  return code === 11 || code === 26;
}

export function openReader(file: string, cacheBytes: number): Database {
  const DatabaseSync = sqliteDatabase();
  let db: Database;
  try {
    db = new DatabaseSync(file, { readOnly: true, timeout: 1000 });
    db.exec(`PRAGMA cache_size = ${-Math.max(64, Math.floor(cacheBytes / 1024))}`);
    registerHoldsFunctions(db);
  } catch (e) {
    throw unreadable(file, e);
  }
  return db;
}
