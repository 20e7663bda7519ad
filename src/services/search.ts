// Search as a use case: the words of a query in the names and turn texts of the sessions the
// caller may list (the lists' rules: ACCESS, projectId, archived, expiry), newest first, from
// the store's index.
import { ValidationError } from '../domain/schema.js';
import { wordsOf } from '../domain/search.js';
import type { ArchivedFilter, Page, SearchFilter, SearchHit, SearchKey, Store } from '../store/store.js';
import type { Access, Caller } from './access.js';

export interface SearchQuery {
  readonly q: string;
  readonly projectId?: string | undefined;
  readonly archived: ArchivedFilter;
}

export class SearchService {
  constructor(
    private readonly store: Store,
    private readonly access: Access,
  ) {}

  /** The query's words, folded: at least one, else a ValidationError. */
  wordsOf(q: string): string[] {
    const words = wordsOf(q);
    if (words.length === 0) throw new ValidationError('q must contain a letter or a digit');
    return words;
  }

  /** Whether a search reads only the caller's own sessions (the lists' rule). */
  ownOnly(projectId: string | undefined): boolean {
    return this.access.ownOnly(projectId);
  }

  /** A page of hits strictly after `after`. */
  search(caller: Caller, query: SearchQuery, words: readonly string[], after: SearchKey | undefined, limit: number): Promise<Page<SearchHit, SearchKey>> {
    const filter: SearchFilter = {
      ...(query.projectId !== undefined ? { project: query.projectId } : {}),
      ...(this.access.ownOnly(query.projectId) ? { user: caller.user } : {}),
      archived: query.archived,
      live: this.access.now(),
      words,
    };
    return this.store.search(filter, after, limit);
  }
}
