// Open connections, at most MAX_CONNECTIONS, so that idle or slow clients cannot use up the
// process's file descriptors. At the cap a newcomer closes the oldest idle connection (no
// request in flight); when every connection is busy, a few more are let in for /healthz and
// /metrics only, and past those the newcomer is answered 503 and closed.
import type { Socket } from 'node:net';

/** Connections let in past the cap when none is idle, for health checks and scrapes. */
export const HEADROOM = 8;

/** One open connection: requests in flight on it and whether it is past the cap. */
export interface Connection {
  requests: number;
  readonly overflow: boolean;
  closed: boolean;
}

export interface ConnectionEvents {
  /** A newcomer found every slot, headroom included, busy: answer it 503 and close it. */
  refuse(socket: Socket): void;
  /** An idle connection was closed to let a newcomer in. */
  evicted(): void;
}

export class ConnectionGuard {
  /** Insertion order is age: the first idle entry is the oldest idle connection. */
  private readonly open = new Map<Socket, Connection>();
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
    if (this.regular >= this.max) this.closeOldestIdle();
    let overflow = false;
    if (this.regular >= this.max) {
      if (this.overflow >= HEADROOM) {
        this.events.refuse(socket);
        return;
      }
      overflow = true;
    }
    const c: Connection = { requests: 0, overflow, closed: false };
    if (overflow) this.overflow++;
    else this.regular++;
    this.open.set(socket, c);
    socket.once('close', () => this.forget(socket, c));
  };

  /** The connection a request arrived on (undefined for one this guard never saw). */
  of(socket: Socket): Connection | undefined {
    return this.open.get(socket);
  }

  private forget(socket: Socket, c: Connection): void {
    if (c.closed) return;
    c.closed = true;
    if (this.open.get(socket) === c) this.open.delete(socket);
    if (c.overflow) this.overflow--;
    else this.regular--;
  }

  private closeOldestIdle(): void {
    for (const [socket, c] of this.open) {
      if (c.requests === 0) {
        this.forget(socket, c);
        socket.destroy();
        this.events.evicted();
        return;
      }
    }
  }
}
