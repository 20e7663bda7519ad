// How PostgreSQL instances tell a reply another instance still generates from one whose instance
// is gone: each instance proves it is alive by its row in `instances` (seen_at, set by the
// database's clock, every fifth of INSTANCE_TIMEOUT, on a connection of its own so that a busy
// pool never holds the proof back), and each reply turn names its instance (turns.generator).
// An instance is gone once its row is older than four fifths of INSTANCE_TIMEOUT; the sweep,
// every tenth of it, then interrupts its replies, so they end within INSTANCE_TIMEOUT of its
// death, and never while it is alive, however quiet the reply.
import { randomBytes } from 'node:crypto';
import { Sparing, type Logger } from '../../log.js';
import { Pool } from '../../pg/pool.js';

export class InstanceLiveness {
  /** This instance's name in `instances` and in the turns it generates: new at each start. */
  readonly id = randomBytes(12).toString('hex');
  /** Connections of their own: the proof goes out even when the store's pool is busy. */
  private readonly pool: Pool;
  private timer: NodeJS.Timeout | undefined;
  /** Since when every proof went through (undefined: the last one failed, or none was made yet). */
  private provenSince: number | undefined;
  private closed = false;
  private readonly failures = new Sparing(60_000);

  constructor(
    url: string,
    private readonly S: string,
    /** INSTANCE_TIMEOUT. */
    private readonly timeoutMs: number,
    private readonly log: Logger,
  ) {
    this.pool = new Pool(url, { max: 1, statementTimeoutMs: Math.max(1000, Math.floor(this.everyMs)), acquireTimeoutMs: Math.max(1000, Math.floor(this.everyMs)) });
  }

  /** How often this instance proves it is alive. */
  get everyMs(): number {
    return this.timeoutMs / 5;
  }

  /** How long an instance may go without proving it before it counts as gone. */
  get goneAfterMs(): number {
    return (this.timeoutMs * 4) / 5;
  }

  /** How often the sweep looks for the replies of instances gone (and streaming turns left idle). */
  get sweepEveryMs(): number {
    return this.timeoutMs / 10;
  }

  /**
   * Whether this instance may take another for gone: only after its own proofs went through for
   * as long as it takes to be gone. After a database outage every instance's row is old; the
   * others are given the same time to prove themselves again before any of them is judged.
   */
  get judging(): boolean {
    return this.provenSince !== undefined && performance.now() - this.provenSince >= this.goneAfterMs;
  }

  /** Proves this instance alive now and every `everyMs` after. */
  async start(): Promise<void> {
    await this.prove();
    this.schedule();
  }

  private schedule(): void {
    if (this.closed) return;
    this.timer = setTimeout(() => void this.prove().finally(() => this.schedule()), this.everyMs);
  }

  private async prove(): Promise<void> {
    try {
      await this.pool.query(`INSERT INTO ${this.S}.instances (id, seen_at) VALUES ($1, clock_timestamp()) ON CONFLICT (id) DO UPDATE SET seen_at = excluded.seen_at`, [this.id]);
      this.provenSince ??= performance.now();
    } catch (e) {
      this.provenSince = undefined;
      if (!this.closed && this.failures.due()) this.log.warn('this instance could not prove it is alive to the database; past INSTANCE_TIMEOUT other instances interrupt its replies (logged once a minute)', { instance: this.id, err: e });
    }
  }

  /** Stops proving, and removes this instance's row (its replies were ended by the stop). */
  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.timer);
    await this.pool.query(`DELETE FROM ${this.S}.instances WHERE id = $1`, [this.id]).catch(() => undefined);
    await this.pool.end();
  }
}
