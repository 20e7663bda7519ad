// A segment trie: `add(method, pattern, value)` and `match(method, path)`. Patterns are
// literal segments and `:name` parameters, and a last `*name` that takes the rest of the path
// (one segment or more, slashes included: an OpenAI model id); a static segment wins over a
// parameter, a parameter over the rest. One trailing slash is ignored. Registering the same method and pattern twice throws.
// Matching walks the path by index and compares static segments in place, so only
// parameter values become new strings.

interface Static<T> {
  readonly seg: string;
  readonly node: Node<T>;
}

interface Node<T> {
  /** Literal children, in registration order (a node has a handful: a list beats a map). */
  readonly statics: Static<T>[];
  param: { readonly name: string; readonly node: Node<T> } | undefined;
  /** A `*name` child: the rest of the path, whatever it holds. */
  rest: { readonly name: string; readonly node: Node<T> } | undefined;
  readonly methods: Map<string, T>;
  /** The pattern that ends here, for error messages and logs. */
  pattern: string | undefined;
}

function node<T>(): Node<T> {
  return { statics: [], param: undefined, rest: undefined, methods: new Map(), pattern: undefined };
}

export type RouteMatch<T> =
  | { readonly kind: 'found'; readonly value: T; readonly params: readonly string[] }
  | { readonly kind: 'method'; readonly allow: readonly string[]; readonly pattern: string }
  | { readonly kind: 'none' };

const NONE = { kind: 'none' } as const;

export class Router<T> {
  private readonly root: Node<T> = node();

  add(method: string, pattern: string, value: T): void {
    if (!pattern.startsWith('/')) throw new Error(`route pattern must start with "/": ${pattern}`);
    let n = this.root;
    const segs = pattern.split('/').slice(1);
    for (const [i, seg] of segs.entries()) {
      if (seg.startsWith('*')) {
        if (i !== segs.length - 1) throw new Error(`route ${pattern}: *${seg.slice(1)} must be the last segment`);
        n.rest ??= { name: seg.slice(1), node: node() };
        n = n.rest.node;
      } else if (seg.startsWith(':')) {
        const name = seg.slice(1);
        if (n.param === undefined) n.param = { name, node: node() };
        else if (n.param.name !== name) throw new Error(`route ${pattern}: parameter :${name} conflicts with :${n.param.name}`);
        n = n.param.node;
      } else {
        if (seg === '') throw new Error(`route ${pattern}: empty segment`);
        let next = n.statics.find((s) => s.seg === seg)?.node;
        if (next === undefined) {
          next = node();
          n.statics.push({ seg, node: next });
        }
        n = next;
      }
    }
    if (n.methods.has(method)) throw new Error(`duplicate route: ${method} ${pattern}`);
    n.methods.set(method, value);
    n.pattern = pattern;
  }

  /** Matches a raw (still percent-encoded) path; parameter values come back raw too. */
  match(method: string, path: string): RouteMatch<T> {
    if (path.charCodeAt(0) !== 47 /* / */) return NONE;
    // the path's segments lie between slashes, up to `end` (one trailing slash left out)
    const end = path.length > 1 && path.charCodeAt(path.length - 1) === 47 ? path.length - 1 : path.length;
    const params: string[] = [];
    const n = this.walk(this.root, path, 1, end, params);
    if (n === undefined) return NONE;
    const value = n.methods.get(method) ?? (method === 'HEAD' ? n.methods.get('GET') : undefined);
    if (value !== undefined) return { kind: 'found', value, params };
    return { kind: 'method', allow: allowOf(n), pattern: n.pattern ?? path.slice(0, end) };
  }

  /** Matches the segment starting at `start` and the rest after it; `start > end` when none is left. */
  private walk(n: Node<T>, path: string, start: number, end: number, params: string[]): Node<T> | undefined {
    if (start > end) return n.methods.size > 0 ? n : undefined;
    let segEnd = path.indexOf('/', start);
    if (segEnd === -1 || segEnd > end) segEnd = end;
    const len = segEnd - start;
    const statics = n.statics;
    for (let i = 0; i < statics.length; i++) {
      const s = statics[i] as Static<T>;
      if (s.seg.length === len && path.startsWith(s.seg, start)) {
        const found = this.walk(s.node, path, segEnd + 1, end, params);
        if (found !== undefined) return found;
        break;
      }
    }
    if (n.param !== undefined) {
      params.push(path.slice(start, segEnd));
      const found = this.walk(n.param.node, path, segEnd + 1, end, params);
      if (found !== undefined) return found;
      params.pop();
    }
    if (n.rest !== undefined && n.rest.node.methods.size > 0) {
      params.push(path.slice(start, end));
      return n.rest.node;
    }
    return undefined;
  }
}

function allowOf<T>(n: Node<T>): string[] {
  const methods = [...n.methods.keys()];
  if (methods.includes('GET') && !methods.includes('HEAD')) methods.push('HEAD');
  return methods;
}
