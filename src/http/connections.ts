// Open connections, at most MAX_CONNECTIONS, so that idle or slow clients cannot use up the
// process's file descriptors. At the cap a newcomer closes an idle connection (no request in
// flight) of the owner holding the most connections, its oldest; when every connection is busy,
// a few more are let in for /healthz and /metrics only, and past those the newcomer is answered
// 503 and closed.
import type { Socket } from 'node:net';

/** Connections let in past the cap when none is idle, for health checks and scrapes. */
export const HEADROOM = 8;

/** One open connection: requests in flight on it, whose it is and whether it is past the cap. */
export interface Connection {
  readonly socket: Socket;
  /** Requests in flight on it: counted by ConnectionGuard.busy and .idle. */
  readonly requests: number;
  readonly overflow: boolean;
  closed: boolean;
}

export interface ConnectionEvents {
  /** A newcomer found every slot, headroom included, busy: answer it 503 and close it. */
  refuse(socket: Socket): void;
  /** An idle connection was closed to let a newcomer in. */
  evicted(): void;
}

/** The guard's own view of a connection. */
interface Slot extends Connection {
  requests: number;
  owner: Owner;
}

/**
 * The connections of one owner: the user of the last request counted on them, or the client
 * address of one that has carried none. Insertion order is the order they joined the owner.
 */
interface Owner {
  readonly key: string;
  readonly slots: Set<Slot>;
  idle: number;
}

export class ConnectionGuard {
  private readonly open = new Map<Socket, Slot>();
  private readonly owners = new Map<string, Owner>();
  private regular = 0;
  private overflow = 0;

  constructor(
    private readonly max: number,
    private readonly events: ConnectionEvents,
  ) {}

  get count(): number {
    return this.regular + this.overflow;
  }

  /** The server's `connection` listener. */
  readonly onConnection = (socket: Socket): void => {
    if (this.regular >= this.max) this.closeIdle();
    let overflow = false;
    if (this.regular >= this.max) {
      if (this.overflow >= HEADROOM) {
        this.events.refuse(socket);
        return;
      }
      overflow = true;
    }
    const slot: Slot = { socket, requests: 0, overflow, closed: false, owner: this.ownerOf(`addr:${socket.remoteAddress ?? 'unknown'}`) };
    slot.owner.slots.add(slot);
    slot.owner.idle++;
    this.open.set(socket, slot);
    if (overflow) this.overflow++;
    else this.regular++;
    socket.once('close', () => this.forget(slot));
  };

  /** The connection a request arrived on (undefined for one this guard never saw or already closed). */
  of(socket: Socket): Connection | undefined {
    return this.open.get(socket);
  }

  /** A request is in flight on `c`: it is not idle until every such request has ended. */
  busy(c: Connection): void {
    const slot = c as Slot;
    if (slot.requests++ === 0 && !slot.closed) slot.owner.idle--;
  }

  /** A request `busy` counted has ended. */
  idle(c: Connection): void {
    const slot = c as Slot;
    if (--slot.requests === 0 && !slot.closed) slot.owner.idle++;
  }

  /** The request on `c` is `owner`'s (`user:<sub>` or `addr:<ip>`): the connection is counted as that owner's from now on. */
  claim(c: Connection, owner: string): void {
    const slot = c as Slot;
    if (slot.closed || slot.owner.key === owner) return;
    this.leave(slot);
    slot.owner = this.ownerOf(owner);
    slot.owner.slots.add(slot);
    if (slot.requests === 0) slot.owner.idle++;
  }

  private ownerOf(key: string): Owner {
    let o = this.owners.get(key);
    if (o === undefined) {
      o = { key, slots: new Set(), idle: 0 };
      this.owners.set(key, o);
    }
    return o;
  }

  private leave(slot: Slot): void {
    const o = slot.owner;
    o.slots.delete(slot);
    if (slot.requests === 0) o.idle--;
    if (o.slots.size === 0) this.owners.delete(o.key);
  }

  private forget(slot: Slot): void {
    if (slot.closed) return;
    this.leave(slot);
    slot.closed = true;
    this.open.delete(slot.socket);
    if (slot.overflow) this.overflow--;
    else this.regular--;
  }

  /**
   * Closes an idle connection to make room: the oldest idle one of the owners holding the most
   * connections (among those with one idle), so a client holding many pays for the newcomer, not
   * one holding a single keep-alive connection; when all hold alike, simply the oldest idle.
   */
  private closeIdle(): void {
    let most = 0;
    for (const o of this.owners.values()) if (o.idle > 0 && o.slots.size > most) most = o.slots.size;
    if (most === 0) return;
    // insertion order is age
    for (const slot of this.open.values()) {
      if (slot.requests === 0 && slot.owner.slots.size === most) {
        this.forget(slot);
        slot.socket.destroy();
        this.events.evicted();
        return;
      }
    }
  }
}
