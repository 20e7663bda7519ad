// An event-stream (text/event-stream) client for the tests, on raw node:http: it parses the
// stream as the HTML standard's EventSource does (fields, comments, the last event id), keeps
// everything it saw, and lets a test wait for a condition instead of a time.
import { request as httpRequest } from 'node:http';

/**
 * Opens `path` on `baseUrl` as an event stream (a GET, or `method` with a `json` body: a
 * message answered as a stream). Resolves once the answer's head is in: a client whose `status`
 * is not 200 has the body in `text` (read to its end) and no events.
 */
export function openEvents(baseUrl, path, { token, headers = {}, method = 'GET', json } = {}) {
  const url = new URL(path, baseUrl);
  const h = { accept: 'text/event-stream', ...headers };
  if (token !== undefined) h.authorization = `Bearer ${token}`;
  const body = json === undefined ? undefined : Buffer.from(JSON.stringify(json));
  if (body !== undefined) {
    h['content-type'] = 'application/json';
    h['content-length'] = String(body.length);
  }
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: url.hostname, port: url.port, method, path: url.pathname + url.search, headers: h, agent: false }, (res) => {
      const c = new EventStreamClient(req, res);
      if (res.statusCode !== 200) {
        c.finished.then(() => resolve(c), reject);
        return;
      }
      resolve(c);
    });
    req.on('error', reject);
    req.end(body);
  });
}

export class EventStreamClient {
  constructor(req, res) {
    this.req = req;
    this.res = res;
    this.status = res.statusCode;
    this.headers = res.headers;
    /** Every event dispatched: {id, event, data (JSON-parsed when it parses), raw}. */
    this.events = [];
    /** Every comment line (without the colon). */
    this.comments = [];
    /** What EventSource's lastEventId would be. */
    this.lastEventId = '';
    this.text = '';
    this.ended = false;
    this.waiters = new Set();
    let buf = '';
    let pending = { data: [], event: '', id: undefined };
    res.setEncoding('utf8');
    res.on('data', (chunk) => {
      this.text += chunk;
      if (this.status !== 200) return;
      buf += chunk;
      let i;
      while ((i = buf.search(/\r\n|\r|\n/)) !== -1) {
        const line = buf.slice(0, i);
        buf = buf.slice(buf[i] === '\r' && buf[i + 1] === '\n' ? i + 2 : i + 1);
        if (line === '') {
          if (pending.id !== undefined) this.lastEventId = pending.id;
          if (pending.data.length > 0) {
            const data = pending.data.join('\n');
            let parsed;
            try {
              parsed = JSON.parse(data);
            } catch {
              parsed = data;
            }
            this.events.push({ id: this.lastEventId, event: pending.event || 'message', data: parsed, raw: data });
          }
          pending = { data: [], event: '', id: undefined };
          this.check();
          continue;
        }
        if (line.startsWith(':')) {
          this.comments.push(line.slice(1).trim());
          this.check();
          continue;
        }
        const colon = line.indexOf(':');
        const field = colon === -1 ? line : line.slice(0, colon);
        let value = colon === -1 ? '' : line.slice(colon + 1);
        if (value.startsWith(' ')) value = value.slice(1);
        if (field === 'data') pending.data.push(value);
        else if (field === 'event') pending.event = value;
        else if (field === 'id' && !value.includes('\0')) pending.id = value;
      }
    });
    this.finished = new Promise((resolve) => {
      const done = () => {
        if (this.ended) return;
        this.ended = true;
        this.check();
        resolve();
      };
      res.on('end', done);
      res.on('close', done);
      res.on('error', done);
      req.on('error', done);
    });
  }

  /** Events of one type. */
  of(type) {
    return this.events.filter((e) => e.event === type);
  }

  /**
   * Resolves with the first event for which `test(event)` holds (or true when `test` is a
   * function of the client itself, see `until`); rejects after `timeoutMs` (a generous bound
   * for a condition that should hold, never a timing assumption) or when the stream ends first.
   */
  waitFor(test, timeoutMs = 20_000) {
    return this.until(() => this.events.find(test), timeoutMs, 'an event that never came');
  }

  /** Resolves with `cond()` once it is truthy. */
  until(cond, timeoutMs = 20_000, what = 'a condition that never held') {
    const now = cond();
    if (now) return Promise.resolve(now);
    return new Promise((resolve, reject) => {
      const w = () => {
        const v = cond();
        if (v) {
          finish();
          resolve(v);
        } else if (this.ended) {
          finish();
          reject(new Error(`the stream ended waiting for ${what}; it had: ${this.text.slice(-2000)}`));
        }
      };
      const timer = setTimeout(() => {
        finish();
        reject(new Error(`timed out waiting for ${what}; the stream had: ${this.text.slice(-2000)}`));
      }, timeoutMs);
      const finish = () => {
        clearTimeout(timer);
        this.waiters.delete(w);
      };
      this.waiters.add(w);
    });
  }

  check() {
    for (const w of [...this.waiters]) w();
  }

  /** Closes the connection from this side. */
  close() {
    this.req.destroy();
    return this.finished;
  }
}
