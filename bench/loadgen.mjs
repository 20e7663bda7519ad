// Closed-loop HTTP/1.1 load generator on raw node:net sockets: N keep-alive connections, each
// writing pre-built request bytes and reading the answer by Content-Length before sending the
// next. node:http's client spends more CPU per request than the servers we measure, so it
// could not saturate them; this does the least work a correct client can.
import { connect } from 'node:net';

/**
 * Request bytes for one request: `body` (object or string) is sent as application/json.
 * Header names are sent as given; a Host header is added (node:http requires one).
 */
export function buildRequest(method, path, { headers = {}, body } = {}) {
  let head = `${method} ${path} HTTP/1.1\r\nhost: 127.0.0.1\r\n`;
  for (const [k, v] of Object.entries(headers)) head += `${k}: ${v}\r\n`;
  if (body === undefined) return Buffer.from(`${head}\r\n`, 'latin1');
  const payload = Buffer.from(typeof body === 'string' ? body : JSON.stringify(body), 'utf8');
  head += `content-type: application/json\r\ncontent-length: ${payload.length}\r\n\r\n`;
  return Buffer.concat([Buffer.from(head, 'latin1'), payload]);
}

const END_OF_HEAD = Buffer.from('\r\n\r\n');

/** Value of Content-Length in a response head, or -1. Node sends header names as the server
 * wrote them (lowercase here); other spellings take the slow path. */
function contentLength(head) {
  let i = head.indexOf('content-length:', 0, 'latin1');
  if (i === -1) i = head.indexOf('Content-Length:', 0, 'latin1');
  if (i === -1) {
    const m = /\r\ncontent-length:[ \t]*(\d+)/i.exec(head.toString('latin1'));
    return m === null ? -1 : Number(m[1]);
  }
  i += 15;
  while (head[i] === 32 || head[i] === 9) i++;
  let n = 0;
  let digits = 0;
  for (let c = head[i]; c >= 48 && c <= 57; c = head[++i]) {
    n = n * 10 + (c - 48);
    digits++;
  }
  return digits === 0 ? -1 : n;
}

/** True when a response head says Connection: close (as the server or Node spells it). */
function closes(head) {
  return head.indexOf('connection: close', 0, 'latin1') !== -1 || head.indexOf('Connection: close', 0, 'latin1') !== -1;
}

/** Latency samples in ms; a growable Float64Array so a few million cost no GC churn. */
class Samples {
  constructor() {
    this.a = new Float64Array(1 << 16);
    this.n = 0;
  }
  push(v) {
    if (this.n === this.a.length) {
      const b = new Float64Array(this.a.length * 2);
      b.set(this.a);
      this.a = b;
    }
    this.a[this.n++] = v;
  }
  sorted() {
    return this.a.slice(0, this.n).sort();
  }
}

/** The value at quantile q (0..1) of an ascending array (nearest rank). */
export function percentile(sorted, q) {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))];
}

/**
 * Runs load for warmupMs (not recorded), then durationMs (recorded), then closes everything.
 * Connection i goes to `ports[i % ports.length]` (several servers sharing one load), else to `port`.
 * `request` is a Buffer sent every time, or a function (connIndex, seq) => Buffer so each
 * request can differ (bodies, ids, one token per connection).
 * Errors: non-2xx answers, and sockets that fail or close with a request in flight.
 * onWindowStart/onWindowEnd run at the edges of the recorded window (to sample server CPU).
 * Resolves {requests, seconds, rps, latencies (sorted ms), errors, statuses, socketErrors, cpu}.
 */
export function runLoad({ port, ports = [port], host = '127.0.0.1', connections, warmupMs, durationMs, request, onWindowStart, onWindowEnd }) {
  const next = typeof request === 'function' ? request : () => request;
  return new Promise((resolve) => {
    const samples = new Samples();
    const statuses = new Map(); // non-2xx status -> count (inside the window)
    let recording = false;
    let stopping = false;
    let requests = 0;
    let errors = 0;
    let socketErrors = 0;
    let warmupErrors = 0;
    let firstError;

    const countError = (what) => {
      if (recording) errors++;
      else warmupErrors++;
      firstError ??= what;
    };

    class Conn {
      constructor(index) {
        this.index = index;
        this.seq = 0;
        this.t0 = 0;
        this.inFlight = false;
        this.head = null; // bytes of a response head split across reads
        this.bodyLeft = -1; // body bytes still to read; -1 while reading a head
        this.status = 0;
        this.closing = false;
        this.readBuffer = Buffer.allocUnsafe(64 * 1024);
        this.open();
      }

      open() {
        // onread hands reads to us in one reused buffer, skipping the stream machinery
        // ('data' events) that would cost the load generator a good part of its CPU
        const s = connect({ port: ports[this.index % ports.length], host, noDelay: true, onread: { buffer: this.readBuffer, callback: (n, buf) => this.onData(buf.subarray(0, n)) } });
        this.socket = s;
        s.on('connect', () => this.send());
        let failure; // 'error' is always followed by 'close', which counts it
        s.on('error', (e) => (failure = e.code ?? e.message));
        s.on('close', () => {
          if (stopping || this.socket !== s) return;
          const broken = this.inFlight || failure !== undefined;
          if (broken) {
            if (recording) socketErrors++;
            countError(failure ?? 'connection closed mid-request');
          }
          // reconnect: at once after an answer that said Connection: close, a little later
          // after a failure so a dead server is not hammered
          this.inFlight = false;
          this.head = null;
          this.bodyLeft = -1;
          setTimeout(() => stopping || this.open(), broken ? 10 : 0);
        });
      }

      send() {
        if (stopping) return;
        this.inFlight = true;
        const bytes = next(this.index, this.seq++);
        this.t0 = performance.now();
        this.socket.write(bytes);
      }

      onData(chunk) {
        let buf = chunk;
        let off = 0;
        while (off < buf.length) {
          if (this.bodyLeft < 0) {
            if (this.head !== null) {
              buf = Buffer.concat([this.head, buf.subarray(off)]);
              off = 0;
              this.head = null;
            }
            const end = buf.indexOf(END_OF_HEAD, off);
            if (end === -1) {
              this.head = Buffer.from(buf.subarray(off)); // a copy: the read buffer is reused
              return;
            }
            this.status = (buf[off + 9] - 48) * 100 + (buf[off + 10] - 48) * 10 + (buf[off + 11] - 48);
            const head = buf.subarray(off, end);
            const len = contentLength(head);
            if (len < 0) {
              countError('response without Content-Length');
              this.inFlight = false; // counted here, not again as a broken connection
              this.socket.destroy();
              return;
            }
            this.bodyLeft = len;
            this.closing = closes(head);
            off = end + 4;
          }
          const take = Math.min(this.bodyLeft, buf.length - off);
          this.bodyLeft -= take;
          off += take;
          if (this.bodyLeft === 0) {
            this.bodyLeft = -1;
            this.complete();
          }
        }
      }

      complete() {
        const ms = performance.now() - this.t0;
        this.inFlight = false;
        const st = this.status;
        if (recording) {
          requests++;
          samples.push(ms);
          if (st < 200 || st > 299) statuses.set(st, (statuses.get(st) ?? 0) + 1);
        }
        if (st < 200 || st > 299) countError(`HTTP ${st}`);
        if (this.closing) this.socket.destroy(); // the server is closing it: 'close' reconnects
        else this.send();
      }
    }

    const conns = [];
    for (let i = 0; i < connections; i++) conns.push(new Conn(i));

    let started = 0;
    let cpuStart;
    setTimeout(() => {
      recording = true;
      onWindowStart?.();
      started = performance.now();
      cpuStart = process.cpuUsage();
      setTimeout(() => {
        const seconds = (performance.now() - started) / 1000;
        const cpu = process.cpuUsage(cpuStart);
        recording = false;
        stopping = true;
        onWindowEnd?.();
        for (const c of conns) c.socket.destroy();
        const latencies = samples.sorted();
        resolve({
          requests,
          seconds,
          rps: requests / seconds,
          latencies,
          errors,
          statuses,
          socketErrors,
          warmupErrors,
          firstError,
          // share of one core the load generator used during the window
          cpu: (cpu.user + cpu.system) / 1e6 / seconds,
        });
      }, durationMs);
    }, warmupMs);
  });
}
