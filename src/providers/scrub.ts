// Removes whatever looks like a credential from text a provider sent (an error body, an error
// event), before it is quoted in a message: a provider may echo the key it was given.

/** Configured values (the key, header values) replaced wherever they appear, in any common encoding. */
function variants(secret: string): string[] {
  const out = new Set([secret, encodeURIComponent(secret), JSON.stringify(secret).slice(1, -1)]);
  return [...out];
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
 * configured key and header values) in raw, URL- and JSON-escaped form, `Bearer ...`-style
 * authorization values, `key=` / `token=` / `secret=` / `password=` (and `:`) values, URL
 * userinfo, and tokens shaped like keys (`sk-...`, JWTs, long opaque strings).
 */
export function scrubCredentials(text: string, secrets: readonly string[]): string {
  let s = text;
  // longest first, so a secret that contains another is replaced whole
  const all = secrets.filter((x) => x !== '').flatMap(variants).sort((a, b) => b.length - a.length);
  for (const secret of all) if (s.includes(secret)) s = s.split(secret).join('***');
  for (const [re, by] of RULES) s = s.replace(re, by);
  return s;
}
