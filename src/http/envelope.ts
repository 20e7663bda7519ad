// Every answer's envelope, written here and nowhere else: `{"success":true,"data":...}` for
// data (a record, a page, a whole list), `{"success":true,"message":...}` for a deletion, and
// `{"success":false,"message":...}` for every refusal and failure (routes, the parser's
// rejects, the connection guard's raw answers).

/** The start of every success answer with data: `data` follows, then the closing brace. */
export const DATA_OPEN = '{"success":true,"data":';

/** `{"success":true,"data":<json>}` around data that is already JSON. */
export function dataBody(json: string): string {
  return `${DATA_OPEN}${json}}`;
}

/** `{"success":true,"message":...}`: what a deletion answers. */
export function doneBody(message: string): string {
  return JSON.stringify({ success: true, message });
}

/** `{"success":false,"message":...}`: every error answer. */
export function errorBody(message: string): string {
  return JSON.stringify({ success: false, message });
}
