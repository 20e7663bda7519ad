// Password authentication during start-up: the answers to the server's Authentication
// requests, for SCRAM-SHA-256 (RFC 5802 / RFC 7677, as PostgreSQL does it, without channel
// binding), md5, a cleartext password, and none (trust). SCRAM checks the server's signature
// too, so a server that does not know the password cannot pretend to accept it.
import { createHash, createHmac, pbkdf2, randomBytes, timingSafeEqual } from 'node:crypto';
import { promisify } from 'node:util';
import { decodeSaslMechanisms } from './backend.js';
import { PgError } from './errors.js';
import { cstringBytes, passwordMessage, saslInitialBody } from './frontend.js';
import type { Password } from './url.js';

const pbkdf2Async = promisify(pbkdf2);

/** The md5 answer: "md5" + md5(md5(password + user) + salt), all in hex. */
export function md5Password(user: string, password: string, salt: Buffer): string {
  const inner = createHash('md5').update(password, 'utf8').update(user, 'utf8').digest('hex');
  return `md5${createHash('md5').update(inner, 'latin1').update(salt).digest('hex')}`;
}

// SASLprep (RFC 4013) as PostgreSQL applies it to SCRAM passwords: non-ASCII spaces become a
// space, "commonly mapped to nothing" characters go, then NFKC. When the result still holds
// a prohibited character PostgreSQL falls back to the raw password, and so does this.
const NON_ASCII_SPACE = /[\u00A0\u1680\u2000-\u200B\u202F\u205F\u3000]/g;
const MAPPED_TO_NOTHING = /[\u00AD\u034F\u1806\u180B-\u180D\u200C\u200D\u2060\uFE00-\uFE0F\uFEFF]/g;
// control characters, private use, surrogates, non-characters and the rest of RFC 3454 C.2-C.9
const PROHIBITED = /[\u0000-\u001F\u007F-\u009F\u06DD\u070F\u180E\u200E\u200F\u2028-\u202E\u206A-\u206F\uD800-\uDFFF\uE000-\uF8FF\uFFF9-\uFFFD]/;

export function saslprep(password: string): string {
  if (/^[\x20-\x7E]*$/.test(password)) return password; // printable ASCII: unchanged
  const mapped = password.replace(NON_ASCII_SPACE, ' ').replace(MAPPED_TO_NOTHING, '').normalize('NFKC');
  return mapped === '' || PROHIBITED.test(mapped) ? password : mapped;
}

function hmac(key: Buffer, text: string): Buffer {
  return createHmac('sha256', key).update(text, 'utf8').digest();
}

function attributes(message: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const part of message.split(',')) {
    if (part.length >= 2 && part[1] === '=') out.set(part[0] as string, part.slice(2));
  }
  return out;
}

function scramError(message: string): PgError {
  return new PgError('auth_failed', `SCRAM-SHA-256: ${message}`);
}

/** One SCRAM-SHA-256 exchange: clientFirst, then clientFinal(serverFirst), then verifyServerFinal. */
export class ScramClient {
  private readonly nonce = randomBytes(18).toString('base64');
  /** The user name is left empty: PostgreSQL takes it from the start-up message. */
  private readonly clientFirstBare = `n=,r=${this.nonce}`;
  private expectedServerSignature: Buffer | undefined;
  /** Set by verifyServerFinal: AuthenticationOk before it is refused. */
  serverVerified = false;

  /** The client-first message; "n,," says this client does not do channel binding. */
  clientFirst(): string {
    return `n,,${this.clientFirstBare}`;
  }

  /** The client-final message with the proof, from the server-first message. */
  async clientFinal(serverFirst: string, password: string): Promise<string> {
    const a = attributes(serverFirst);
    const nonce = a.get('r');
    const salt = a.get('s');
    const iterations = Number(a.get('i'));
    if (nonce === undefined || !nonce.startsWith(this.nonce) || nonce.length === this.nonce.length) {
      throw scramError('the server nonce does not extend the client nonce');
    }
    if (salt === undefined || salt === '') throw scramError('no salt in the server-first message');
    if (!Number.isInteger(iterations) || iterations < 1) throw scramError('bad iteration count');
    // asynchronous, so that a pool opening many connections does not block the event loop
    const salted = await pbkdf2Async(saslprep(password), Buffer.from(salt, 'base64'), iterations, 32, 'sha256');
    const clientKey = hmac(salted, 'Client Key');
    const storedKey = createHash('sha256').update(clientKey).digest();
    const withoutProof = `c=biws,r=${nonce}`; // biws = base64("n,,")
    const authMessage = `${this.clientFirstBare},${serverFirst},${withoutProof}`;
    const signature = hmac(storedKey, authMessage);
    for (let i = 0; i < clientKey.length; i++) clientKey[i] = (clientKey[i] ?? 0) ^ (signature[i] ?? 0);
    this.expectedServerSignature = hmac(hmac(salted, 'Server Key'), authMessage);
    return `${withoutProof},p=${clientKey.toString('base64')}`;
  }

  /** Throws unless the server-final message proves the server knows the password too. */
  verifyServerFinal(serverFinal: string): void {
    const a = attributes(serverFinal);
    const error = a.get('e');
    if (error !== undefined) throw scramError(`the server refused: ${error}`);
    const v = a.get('v');
    const expected = this.expectedServerSignature;
    if (v === undefined || expected === undefined) throw scramError('no server signature');
    const given = Buffer.from(v, 'base64');
    if (given.length !== expected.length || !timingSafeEqual(given, expected)) {
      throw scramError('the server signature does not match: the server does not know the password');
    }
    this.serverVerified = true;
  }
}

/** One start-up's authentication: answers each Authentication request the server sends. */
export class Authentication {
  private scram: ScramClient | undefined;

  constructor(
    private readonly user: string,
    private readonly password: Password | undefined,
    /** Where the connection goes, for messages. */
    private readonly target: string,
  ) {}

  /**
   * The answer to one Authentication message (body from `at` to `end`): bytes to send, now
   * or once computed, or undefined when none is due. Throws PgError `auth_failed`.
   */
  answer(buf: Buffer, at: number, end: number): Buffer | Promise<Buffer> | undefined {
    const code = buf.readInt32BE(at);
    switch (code) {
      case 0: // AuthenticationOk
        if (this.scram !== undefined && !this.scram.serverVerified) {
          throw new PgError('auth_failed', `${this.target}: the server ended SCRAM without proving it knows the password`);
        }
        return undefined;
      case 3: // AuthenticationCleartextPassword
        return passwordMessage(cstringBytes(this.secret()));
      case 5: // AuthenticationMD5Password, with a 4-byte salt
        return passwordMessage(cstringBytes(md5Password(this.user, this.secret(), buf.subarray(at + 4, at + 8))));
      case 10: {
        // AuthenticationSASL: the mechanisms the server offers
        const mechanisms = decodeSaslMechanisms(buf, at + 4, end);
        if (!mechanisms.includes('SCRAM-SHA-256')) {
          throw new PgError('auth_failed', `${this.target}: no supported SASL mechanism in ${mechanisms.join(', ')}`);
        }
        this.secret(); // fail now if there is none
        this.scram = new ScramClient();
        return passwordMessage(saslInitialBody('SCRAM-SHA-256', this.scram.clientFirst()));
      }
      case 11: {
        // AuthenticationSASLContinue: the server-first message
        if (this.scram === undefined) throw new PgError('protocol', 'SASLContinue without SASL');
        return this.scram.clientFinal(buf.toString('utf8', at + 4, end), this.secret()).then((final) => passwordMessage(Buffer.from(final, 'utf8')));
      }
      case 12: // AuthenticationSASLFinal: the server's proof
        if (this.scram === undefined) throw new PgError('protocol', 'SASLFinal without SASL');
        this.scram.verifyServerFinal(buf.toString('utf8', at + 4, end));
        return undefined;
      default:
        throw new PgError('auth_failed', `${this.target}: unsupported authentication method (code ${code})`);
    }
  }

  private secret(): string {
    if (this.password === undefined) throw new PgError('auth_failed', `${this.target}: the server asks for a password and none was given`);
    return this.password.reveal();
  }
}
