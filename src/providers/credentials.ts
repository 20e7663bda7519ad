// Which fields of a providers file are credentials, by a rule on their names rather than a list
// of names (docs/DECISIONS.md, "Providers"): a name is split into words, and one credential
// word among them makes its value a secret, whatever the spelling of the rest.

/** Words that make a name a credential's, alone, with an `s`, or ending a longer word (`apikey`). */
const CREDENTIAL_WORDS = [
  'key', 'secret', 'token', 'password', 'passwd', 'pwd', 'passcode', 'passphrase', 'auth', 'authorization',
  'authentication', 'bearer', 'cookie', 'credential', 'jwt', 'signature', 'private', 'pass', 'otp', 'salt',
];
const CREDENTIAL = new RegExp(`(${CREDENTIAL_WORDS.join('|')})s?$`);
/** Words that make a number a count or a limit (`maxTokens: 4096`), not a secret. */
const COUNT_WORDS = new Set(['max', 'min', 'limit', 'limits', 'count', 'total', 'per', 'size']);

/**
 * The lowercase words of a field name: split at every character that is not an ASCII letter or
 * digit, between letters and digits, and at case changes (`X-Goog-Api-Key` is x goog api key,
 * `aws_secret_access_key` aws secret access key, `APIKey2` api key 2).
 */
export function nameWords(name: string): string[] {
  return name
    .replace(/(?<=[a-z])(?=[A-Z])/g, ' ') // apiKey
    .replace(/(?<=[A-Z])(?=[A-Z][a-z])/g, ' ') // APIKey
    .replace(/(?<=[A-Za-z])(?=[0-9])|(?<=[0-9])(?=[A-Za-z])/g, ' ') // key2, 2fa
    .split(/[^A-Za-z0-9]+/)
    .filter((w) => w !== '')
    .map((w) => w.toLowerCase());
}

const isCredentialWord = (w: string): boolean => CREDENTIAL.test(w);

/** Whether a field of this name holds a credential: one of its words is, or ends with, a credential word. */
export function isCredentialName(name: string): boolean {
  return nameWords(name).some(isCredentialWord);
}

/**
 * Whether a number under a credential's name is a count and not a secret: the name says so
 * (`maxTokens`, `tokenLimit`, `tokensPerMinute`), or its credential words are all plurals
 * (`contextTokens`: no one secret is called "tokens").
 */
export function isCountName(name: string): boolean {
  const words = nameWords(name);
  if (words.some((w) => COUNT_WORDS.has(w))) return true;
  const credential = words.filter(isCredentialWord);
  return credential.length > 0 && credential.every((w) => w.endsWith('s') && isCredentialWord(w.slice(0, -1)));
}

/** Whether a field of this name holds HTTP headers (`headers`, `extraHeaders`, `http_header`): every value under it is masked. */
export function isHeadersName(name: string): boolean {
  return nameWords(name).some((w) => w === 'headers' || w === 'header');
}
