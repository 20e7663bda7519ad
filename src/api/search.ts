// Search (GET /api/v1/search): the words of `q` in the names and turn texts of the sessions the
// caller may list, newest first, a page at a time, each hit with a snippet. The store answers
// from its search index; which sessions are read follows the lists' rules (ACCESS, projectId,
// archived, expiry), and the folding and snippets are the domain's (src/domain/search.ts).
import { snippetOf, turnTextOfJson } from '../domain/search.js';
import type { QuerySchema } from '../domain/schema.js';
import type { ArchivedFilter, SearchHit } from '../store/store.js';
import { pageReply } from './lists.js';
import { caller, type SessionDeps } from './common.js';
import { route, type RouteDef } from './route.js';

export const QUERY_MAX = 200;
/** The page a search answers when no `limit` is given: a search is always paged. */
export const SEARCH_PAGE = 20;

const searchQuery = {
  fields: {
    q: { kind: 'string', required: true, maxLength: QUERY_MAX, description: 'Words to find, ignoring case; every word must start a word of the name or turn text. 1-200 characters.' },
    projectId: { kind: 'string', description: "When present and non-empty: search the project's sessions (under ACCESS); otherwise the caller's own." },
    archived: { kind: 'string', oneOf: ['false', 'true', 'all'], description: 'false (default): active sessions; true: only archived ones; all: both.' },
    limit: { kind: 'integer', min: 1, max: 1000, description: `Page size (default ${SEARCH_PAGE}). The answer always carries \`nextCursor\` (null on the last page).` },
    cursor: { kind: 'string', description: 'The `nextCursor` of the previous page of the same search.' },
  },
} as const satisfies QuerySchema;

export function searchRoutes({ search, cursors }: SessionDeps): RouteDef[] {
  return [
    route<typeof searchQuery.fields>({
      method: 'GET',
      path: '/api/v1/search',
      operationId: 'searchChatSessions',
      summary: 'Find words in the names and turns of the sessions the caller may list, newest first',
      tag: 'Chat sessions',
      auth: true,
      scope: 'sessions:read',
      query: searchQuery,
      responses: [{ status: 200, description: 'The hits: the session, the turn (null for its name) and a snippet', schema: 'SearchHitList' }],
      async handle(ctx) {
        const who = caller(ctx);
        const { projectId, q, cursor } = ctx.query;
        const words = search.wordsOf(q as string);
        const query = { q: q as string, projectId, archived: (ctx.query.archived ?? 'false') as ArchivedFilter };
        // a cursor pages the search it came from only
        const listName = `search\n${projectId ?? ''}\n${search.ownOnly(projectId) ? who.user : ''}\n${query.archived}\n${words.join(' ')}`;
        let after;
        if (cursor !== undefined) {
          const [at, doc] = cursors.decode(listName, cursor);
          after = { at, doc };
        }
        const page = await search.search(who, query, words, after, ctx.query.limit ?? SEARCH_PAGE);
        const items = page.items.map((h) => hitJson(h, words));
        return pageReply(items, page.next === undefined ? undefined : cursors.encode(listName, page.next.at, page.next.doc));
      },
    }),
  ];
}

/** `{"session":...,"turnId":...,"snippet":...}`, the session's JSON as the store keeps it. */
function hitJson(h: SearchHit, words: readonly string[]): string {
  const text = h.turn === undefined ? h.session.session.name : turnTextOfJson(h.turn.json);
  return `{"session":${h.session.json},"turnId":${h.turn === undefined ? 'null' : JSON.stringify(h.turn._id)},"snippet":${JSON.stringify(snippetOf(text, words))}}`;
}
