// Removes whatever looks like a credential from text a provider sent (an error body, an error
// event), before it is quoted in a message: a provider may echo the key it was given.

/** Encoded forms shorter than this are not looked for: they would match ordinary words. */
const ENCODED_MIN = 8;
/** A secret spaced out character by character is looked for when it has at least this many characters. */
const SPACED_MIN = 8;

/**
 * The forms a configured value (the key, a header value, URL credentials) may be quoted in:
 * raw, URL-encoded (its special characters or every byte, either case of the escapes),
 * JSON-escaped, hex (either case), and base64 and
 * base64url whole or as the run of characters its bytes alone decide wherever it sits in a
 * longer encoded text (each of the three alignments: a key inside a base64'd JSON body).
 */
function variants(secret: string): string[] {
  const url = encodeURIComponent(secret);
  const out = new Set([secret, url, url.replace(/%[0-9A-F]{2}/g, (e) => e.toLowerCase()), JSON.stringify(secret).slice(1, -1)]);
  const bytes = Buffer.from(secret, 'utf8');
  const hex = bytes.toString('hex');
  // (every byte percent-escaped is URL-encoding too: what some clients and logs write)
  const escaped = hex.replace(/../g, '%$&');
  for (const form of [hex, hex.toUpperCase(), escaped, escaped.toUpperCase()]) if (form.length >= ENCODED_MIN) out.add(form);
  for (const encoding of ['base64', 'base64url'] as const) {
    const whole = bytes.toString(encoding);
    if (whole.length >= ENCODED_MIN) out.add(whole);
    for (let k = 0; k < 3; k++) {
      const shifted = Buffer.concat([Buffer.alloc(k), bytes]).toString(encoding);
      // character j holds bits 6j..6j+5 of the shifted bytes: those of the secret alone are kept
      const core = shifted.slice(Math.ceil((8 * k) / 6), Math.floor((8 * (k + bytes.length)) / 6));
      if (core.length >= ENCODED_MIN) out.add(core);
    }
  }
  return [...out];
}

/** `text` with each of `secrets` (of SPACED_MIN characters or more) replaced where it appears spaced out: compared with whitespace removed. */
function unspaced(text: string, secrets: readonly string[]): string {
  const wanted = [...new Set(secrets.map((x) => x.replace(/\s+/g, '')).filter((x) => x.length >= SPACED_MIN))];
  if (wanted.length === 0) return text;
  // the text without its whitespace, and where each of its characters sits in the text
  const at: number[] = [];
  let squeezed = '';
  for (let i = 0; i < text.length; i++) {
    if (/\s/.test(text[i] as string)) continue;
    at.push(i);
    squeezed += text[i];
  }
  const cuts: [number, number][] = [];
  for (const x of wanted) {
    for (let i = squeezed.indexOf(x); i >= 0; i = squeezed.indexOf(x, i + x.length)) cuts.push([at[i] as number, (at[i + x.length - 1] as number) + 1]);
  }
  if (cuts.length === 0) return text;
  cuts.sort((a, b) => a[0] - b[0]);
  let out = '';
  let from = 0;
  for (const [start, end] of cuts) {
    if (end <= from) continue;
    out += `${text.slice(from, Math.max(from, start))}***`;
    from = end;
  }
  return out + text.slice(from);
}

const RULES: readonly [RegExp, string][] = [
  // URL userinfo, up to the last @ of the authority as URL parsers read it
  [/([a-z][a-z0-9+.-]*:\/\/)[^/?#\s"'<>]+@/gi, '$1***@'],
  // HTTP authorization schemes followed by their credential
  [/\b(Bearer|Basic|Token|Digest)\s+[^\s"',;)]+/gi, '$1 ***'],
  // name = value or name: value (also "name": "value") for credential-like names
  // (any words before the name: x-api-key, access_token, client_secret; but not max_tokens)
  [/((?<![A-Za-z0-9_-])(?:[A-Za-z0-9]+[-_])*(?:api[-_]?key|key|token|secret|password|passwd|pwd|auth|authorization|signature|sig|credential)["']?\s*[=:]\s*["']?)(?!\*\*\*|(?:Bearer|Basic|Token|Digest)\s)[^\s"'&,;)}\]]+/gi, '$1***'],
  // keys by their well-known shapes: sk-..., sk-ant-..., sk-proj-..., gsk_..., xai-..., hf_..., ghp_..., AIza...
  [/(?<![A-Za-z0-9])(?:sk|pk|rk|gsk|xai|hf|ghp|gho|ghs|glpat)[-_][A-Za-z0-9_*.-]{5,}[A-Za-z0-9_*]/g, '***'],
  [/(?<![A-Za-z0-9])AIza[A-Za-z0-9_-]{20,}/g, '***'],
  // a JSON Web Token
  [/(?<![A-Za-z0-9])eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*/g, '***'],
  // a long run of letters and digits (40 or more, both present): an opaque secret more often
  // than not (not across `/` or `.`: a model path like meta-llama/Meta-Llama-3.1-70B-Instruct stays)
  [/(?<![A-Za-z0-9_-])(?=[A-Za-z0-9_-]*[0-9])(?=[A-Za-z0-9_-]*[A-Za-z])[A-Za-z0-9_-]{40,}/g, '***'],
];

/**
 * `text` with every credential-like piece replaced by `***`: each of `secrets` (the provider's
 * configured key, header values and URL credentials) in any of the forms `variants` lists and
 * spaced out character by character, `Bearer ...`-style
 * authorization values, `key=` / `token=` / `secret=` / `password=` (and `:`) values, URL
 * userinfo, and tokens shaped like keys (`sk-...`, JWTs, long opaque strings).
 */
export function scrubCredentials(text: string, secrets: readonly string[]): string {
  let s = text;
  // longest first, so a secret that contains another is replaced whole
  const all = secrets.filter((x) => x !== '').flatMap(variants).sort((a, b) => b.length - a.length);
  for (const secret of all) if (s.includes(secret)) s = s.split(secret).join('***');
  s = unspaced(s, secrets);
  for (const [re, by] of RULES) s = s.replace(re, by);
  return s;
}
