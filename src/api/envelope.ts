// Every answer's envelope, written here and nowhere else: `{"success":true,"data":...}` for
// data (a record, a page, a whole list), `{"success":true,"message":...}` for a deletion, and
// `{"success":false,"message":...}` for every refusal and failure (routes, the parser's
// rejects, the connection guard's raw answers).

/** The start of every success answer with data: `data` follows, then the closing brace. */
export const DATA_OPEN = '{"success":true,"data":';

/** What closes it. */
export const DATA_CLOSE = '}';

/** `{"success":true,"data":<json>}` around data that is already JSON. */
export function dataBody(json: string): string {
  return `${DATA_OPEN}${json}${DATA_CLOSE}`;
}

/** `{"success":true,"message":...}`: what a deletion answers. */
export function doneBody(message: string): string {
  return JSON.stringify({ success: true, message });
}

/** `{"success":false,"message":...}`: every error answer. */
export function errorBody(message: string): string {
  return JSON.stringify({ success: false, message });
}

/** A list's answer opens with this; its items follow, separated by commas. */
export const LIST_OPEN = `${DATA_OPEN}[`;

/** A whole list's answer ends with this. */
export const LIST_CLOSE = ']}';

/** A page's answer ends with this: the list, then `nextCursor` (null on the last page). */
export function pageClose(nextCursor: string | undefined): string {
  return `],"nextCursor":${nextCursor === undefined ? 'null' : JSON.stringify(nextCursor)}}`;
}
