// A segment trie: `add(method, pattern, value)` and `match(method, path)`. Patterns are
// literal segments and `:name` parameters; a static segment wins over a parameter. One
// trailing slash is ignored. Registering the same method and pattern twice throws.

interface Node<T> {
  readonly statics: Map<string, Node<T>>;
  param: { readonly name: string; readonly node: Node<T> } | undefined;
  readonly methods: Map<string, T>;
  /** The pattern that ends here, for error messages and logs. */
  pattern: string | undefined;
}

function node<T>(): Node<T> {
  return { statics: new Map(), param: undefined, methods: new Map(), pattern: undefined };
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
    for (const seg of pattern.split('/').slice(1)) {
      if (seg.startsWith(':')) {
        const name = seg.slice(1);
        if (n.param === undefined) n.param = { name, node: node() };
        else if (n.param.name !== name) throw new Error(`route ${pattern}: parameter :${name} conflicts with :${n.param.name}`);
        n = n.param.node;
      } else {
        if (seg === '') throw new Error(`route ${pattern}: empty segment`);
        let next = n.statics.get(seg);
        if (next === undefined) {
          next = node();
          n.statics.set(seg, next);
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
    if (path.length > 1 && path.charCodeAt(path.length - 1) === 47 /* / */) path = path.slice(0, -1);
    if (path.charCodeAt(0) !== 47) return NONE;
    const segs = path.split('/');
    const params: string[] = [];
    const end = this.walk(this.root, segs, 1, params);
    if (end === undefined) return NONE;
    const value = end.methods.get(method) ?? (method === 'HEAD' ? end.methods.get('GET') : undefined);
    if (value !== undefined) return { kind: 'found', value, params };
    return { kind: 'method', allow: allowOf(end), pattern: end.pattern ?? path };
  }

  private walk(n: Node<T>, segs: readonly string[], i: number, params: string[]): Node<T> | undefined {
    if (i === segs.length) return n.methods.size > 0 ? n : undefined;
    const seg = segs[i] as string;
    const s = n.statics.get(seg);
    if (s !== undefined) {
      const found = this.walk(s, segs, i + 1, params);
      if (found !== undefined) return found;
    }
    if (n.param !== undefined) {
      params.push(seg);
      const found = this.walk(n.param.node, segs, i + 1, params);
      if (found !== undefined) return found;
      params.pop();
    }
    return undefined;
  }

  /** Every pattern with its methods, in registration order per node. */
  routes(): { pattern: string; method: string; value: T }[] {
    const out: { pattern: string; method: string; value: T }[] = [];
    const visit = (n: Node<T>): void => {
      if (n.pattern !== undefined) for (const [method, value] of n.methods) out.push({ pattern: n.pattern, method, value });
      for (const c of n.statics.values()) visit(c);
      if (n.param !== undefined) visit(n.param.node);
    };
    visit(this.root);
    return out;
  }
}

function allowOf<T>(n: Node<T>): string[] {
  const methods = [...n.methods.keys()];
  if (methods.includes('GET') && !methods.includes('HEAD')) methods.push('HEAD');
  return methods;
}
