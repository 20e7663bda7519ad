// The models of the configured providers as OpenAI's API names them (`GET /v1/models`, a
// request's `model`): `<slug>/<model>`, the slug the provider's own `slug` field or its name made
// into one, and a bare model name where exactly one provider lists it.
import type { ProviderCatalog, ProviderRecord } from './catalog.js';
import { canReply } from './config.js';

/** One model as `/v1/models` lists it. */
export interface ModelEntry {
  readonly id: string;
  /** The provider's name. */
  readonly ownedBy: string;
  readonly providerId: string;
  readonly model: string;
}

/** Where a request's `model` goes: a provider (by its record's lowercase `_id`) and the model asked of it. */
export interface ModelChoice {
  readonly providerId: string;
  readonly model: string;
}

/** Why a request's `model` names no model: none (404) or several (400, naming them). */
export type ModelMiss = { readonly kind: 'none' } | { readonly kind: 'several'; readonly choices: readonly string[] };

/** A provider that can reply, and its slug. */
interface Slugged {
  readonly slug: string;
  readonly id: string;
  readonly name: string;
  readonly models: readonly string[];
}

/** The name made into a slug: lowercase, each run of characters other than a-z and 0-9 one `-`, none at either end. */
export function slugOf(name: string): string {
  return name
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, '-')
    .replace(/^-+|-+$/g, '');
}

/** The model ids of one catalog, made once per catalog (a SIGHUP's reload makes a new one). */
export class ModelIds {
  private readonly providers: readonly Slugged[];
  private readonly bySlug: ReadonlyMap<string, Slugged>;
  readonly entries: readonly ModelEntry[];
  /** When the catalog was loaded, in seconds: every model's `created`. */
  readonly created: number;

  constructor(catalog: ProviderCatalog) {
    const all: { id: string; name: string; slug: string; models: string[] }[] = [];
    for (const [id, r] of catalog.records) {
      if (!canReply(r['type'])) continue;
      const name = typeof r['name'] === 'string' ? r['name'] : id;
      const own = typeof r['slug'] === 'string' && r['slug'].trim() !== '' ? r['slug'].trim() : slugOf(name);
      all.push({ id, name, slug: own === '' ? id : own, models: modelsOf(r) });
    }
    // a slug two providers share names neither: each goes by its _id
    const count = new Map<string, number>();
    for (const p of all) count.set(p.slug, (count.get(p.slug) ?? 0) + 1);
    this.providers = all.map((p) => ({ ...p, slug: (count.get(p.slug) ?? 0) > 1 ? p.id : p.slug })).sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : a.id < b.id ? -1 : 1));
    this.bySlug = new Map(this.providers.map((p) => [p.slug, p]));
    this.entries = this.providers.flatMap((p) => p.models.map((m) => ({ id: `${p.slug}/${m}`, ownedBy: p.name, providerId: p.id, model: m })));
    this.created = Math.floor(Date.parse(catalog.loadedAt) / 1000);
  }

  /**
   * Where `model` goes: `<slug>/<model>` (split at the first `/` whose left side is a slug, so a
   * model name may hold `/` too), else a bare name that exactly one provider lists in `models`.
   */
  resolve(model: string): ModelChoice | ModelMiss {
    for (let at = model.indexOf('/'); at > 0; at = model.indexOf('/', at + 1)) {
      const p = this.bySlug.get(model.slice(0, at));
      if (p !== undefined && at + 1 < model.length) return { providerId: p.id, model: model.slice(at + 1) };
    }
    const listing = this.providers.filter((p) => p.models.includes(model));
    if (listing.length === 1) return { providerId: (listing[0] as Slugged).id, model };
    if (listing.length > 1) return { kind: 'several', choices: listing.map((p) => `${p.slug}/${model}`) };
    return { kind: 'none' };
  }

  /** The entry `/v1/models/{id}` answers: a listed model only. */
  entry(id: string): ModelEntry | undefined {
    return this.entries.find((e) => e.id === id);
  }
}

function modelsOf(r: ProviderRecord): string[] {
  const m = r['models'];
  return Array.isArray(m) ? m.filter((x): x is string => typeof x === 'string' && x !== '') : [];
}
