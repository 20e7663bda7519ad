// GET /docs: an HTML reference of the OpenAPI document with a try-it form, in one answer.
// Its script and style (src/api/docs/, inlined by build.mjs) and the document itself are all
// in the page; a Content-Security-Policy allows exactly those two inline blocks by their
// hashes and lets the page talk to this server only, so it works in an air-gapped browser.
import { createHash } from 'node:crypto';

declare const __DOCS_SCRIPT__: string;
declare const __DOCS_STYLE__: string;

export interface DocsPage {
  readonly html: string;
  /** Header name/value pairs: the Content-Security-Policy and its companions. */
  readonly headers: readonly string[];
}

const sha256 = (text: string): string => `'sha256-${createHash('sha256').update(text, 'utf8').digest('base64')}'`;

/** The page for an OpenAPI document given as JSON text. */
export function docsPage(openApiJson: string, title: string): DocsPage {
  const script = typeof __DOCS_SCRIPT__ === 'string' ? __DOCS_SCRIPT__ : '';
  const style = typeof __DOCS_STYLE__ === 'string' ? __DOCS_STYLE__ : '';
  // JSON inside a script element: "<" escaped so that no "</script>" in a description can end it
  const data = openApiJson.replace(/</g, '\\u003c');
  const html =
    `<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">` +
    // an empty icon, so the browser does not ask this server for /favicon.ico
    `<link rel="icon" href="data:,">` +
    `<title>${escapeHtml(title)}: API reference</title><style>${style}</style></head>\n` +
    `<body><div id="app"><p>This page renders the API reference with JavaScript; the document itself is at <a href="/api/v1/openapi.json">/api/v1/openapi.json</a>.</p></div>\n` +
    `<script type="application/json" id="openapi">${data}</script>\n<script>${script}</script></body></html>\n`;
  const csp = [
    "default-src 'none'",
    `script-src ${sha256(script)}`,
    `style-src ${sha256(style)}`,
    "connect-src 'self'",
    "img-src data:",
    "base-uri 'none'",
    "form-action 'none'",
    "frame-ancestors 'none'",
  ].join('; ');
  return { html, headers: ['content-security-policy', csp, 'referrer-policy', 'no-referrer', 'x-frame-options', 'DENY'] };
}

function escapeHtml(s: string): string {
  return s.replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' })[c] as string);
}
