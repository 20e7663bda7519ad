// How a call to a model provider fails: one error class whose message names the provider and
// says what happened in words, never with its key, and says whether the trouble was passing.
import { DomainError } from '../domain/errors.js';

/**
 * A provider's call failed. `message` is ready to show (and to record as the reply's error):
 * it names the provider by its `name`, says what happened (an HTTP status, the provider's own
 * error message with anything like a credential removed, a timeout), and never holds the key.
 */
export class ProviderFailed extends Error {
  override readonly name = 'ProviderFailed';
  constructor(
    message: string,
    /**
     * The provider's trouble was passing (unreachable, cut, rate-limited, overloaded, a 5xx):
     * tried again when it came before the first piece of text; the same request may work later.
     */
    readonly transient: boolean,
    /** The provider's HTTP status, when it answered one other than 200. */
    readonly status?: number,
  ) {
    super(message);
  }
}

/**
 * The provider's configuration cannot be used for a reply: a type that cannot reply, or a
 * `baseUrl`, `headers` or `models` field that is not what it must be. Found before any call.
 */
export class ProviderUnusable extends DomainError {
  override readonly name = 'ProviderUnusable';
  constructor(message: string) {
    super('cannot_reply', message);
  }
}

/** What a client reads in a stream that tells it the reply failed; call.ts words it into a ProviderFailed. */
export class StreamFailure extends Error {
  override readonly name = 'StreamFailure';
  constructor(
    /** What happened, in words, without the provider's name (the caller adds it). */
    message: string,
    readonly transient: boolean,
  ) {
    super(message);
  }
}
