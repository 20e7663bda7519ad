// A session as both engines read it from its row: its JSON and version as stored, the record
// parsed only when asked for (most answers send the JSON as it is).
import type { ChatSession } from '../domain/records.js';
import type { SessionRecord } from './store.js';

export class SessionRow implements SessionRecord {
  private parsed: ChatSession | undefined;
  constructor(
    readonly json: string,
    readonly version: string,
  ) {}
  get session(): ChatSession {
    return (this.parsed ??= JSON.parse(this.json) as ChatSession);
  }
}
