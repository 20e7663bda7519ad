// What was wrong with a request that node:http's parser refused, said so a client can act on
// it: which header's value holds a line break (a shell variable holding two lines, say), or
// only "Bad request". The raw bytes are read for a header's name, never echoed otherwise.

/** llhttp's errors in a header's value: a bare LF in it, or the line after it not a header. */
const IN_HEADER_VALUE = new Set(['HPE_CR_EXPECTED', 'HPE_LF_EXPECTED', 'HPE_INVALID_HEADER_TOKEN']);
const HEADER_LINE = /^([!#$%&'*+.^_`|~0-9A-Za-z-]{1,64})[ \t]*:/;

interface ParserError {
  readonly code?: string | undefined;
  /** The chunk the parser was reading, and how far into it it got. */
  readonly rawPacket?: unknown;
  readonly bytesParsed?: unknown;
}

/** The header whose value the parser stopped in, when the bytes show one; undefined otherwise. */
function brokenHeader(err: ParserError): string | undefined {
  const raw = err.rawPacket;
  const at = err.bytesParsed;
  if (err.code === undefined || !IN_HEADER_VALUE.has(err.code) || !Buffer.isBuffer(raw) || typeof at !== 'number') return undefined;
  const lines = raw.subarray(0, Math.min(at, raw.length)).toString('latin1').split('\n');
  if (lines.length < 2) return undefined; // still in the request line
  const current = lines[lines.length - 1] as string;
  if (err.code === 'HPE_CR_EXPECTED') {
    // a bare LF ended this header's line; if what follows is a header too, the client ends its lines with LF alone
    const next = raw.subarray(at).toString('latin1').replace(/^\n/, '').split(/\r?\n/)[0] ?? '';
    return HEADER_LINE.test(next) ? undefined : HEADER_LINE.exec(current)?.[1];
  }
  // the line the parser stopped in is no header: the one before it went on past its line break
  const whole = current + (raw.subarray(at).toString('latin1').split(/\r?\n/)[0] ?? '');
  if (whole.includes(':') && !/^[ \t]/.test(whole)) return undefined; // a header with a bad name
  return HEADER_LINE.exec((lines[lines.length - 2] as string).replace(/\r$/, ''))?.[1];
}

/** The message of the 400 for a request the parser refused. */
export function parseErrorMessage(err: ParserError): string {
  const header = brokenHeader(err);
  if (header === undefined) return 'Bad request';
  if (header.toLowerCase() === 'last-event-id') return 'Last-Event-ID must be one event id (an integer); this one holds a line break';
  return `Bad request: the ${header} header holds a line break`;
}
