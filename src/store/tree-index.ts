// How the database engines find a page of a long branch without walking all of it: each turn
// keeps its depth (0 for a root) and a jump pointer, its nearest ancestor whose depth is a
// multiple of JUMP (`skip_id`). The ancestor of a turn at any depth is reached in at most
// depth / JUMP jumps and JUMP steps, so a page of a branch costs its own turns plus about
// depth / JUMP + JUMP lookups, not the whole path from the head. The journal walks its
// in-memory parent references instead.

/** Depths between two jump targets. */
export const JUMP = 32;

/** A turn's place in the jump index: its depth and its jump pointer. */
export interface TreePlace {
  readonly depth: number;
  readonly skipId: string | null;
}

/** The place of a turn under `parent` (undefined: a root). */
export function placeUnder(parent: { readonly id: string; readonly depth: number; readonly skipId: string | null } | undefined): TreePlace {
  if (parent === undefined) return { depth: 0, skipId: null };
  return { depth: parent.depth + 1, skipId: parent.depth % JUMP === 0 ? parent.id : parent.skipId };
}

/** The places of a chain of turns from a root (a fork's copies, root first), by their ids. */
export function placesOfChain(ids: readonly string[]): TreePlace[] {
  return ids.map((_, i) => ({ depth: i, skipId: i === 0 ? null : (ids[Math.floor((i - 1) / JUMP) * JUMP] as string) }));
}

/**
 * The SQL (for SQLite and PostgreSQL alike) of the keys of a page of a branch by depth: the
 * turns at depths `lo` .. `hi` of the path to the target, deepest first, with each one's parent.
 * `turns` is the (qualified) table, `target` and `bounds` are CTEs the caller defines:
 * target(id, depth) and bounds(lo, hi).
 */
export function pageByDepthSql(turns: string): string {
  return `hop(id, parent_id, skip_id, depth) AS (
      SELECT n.id, n.parent_id, n.skip_id, n.depth FROM target JOIN ${turns} n ON n.id = target.id
      UNION ALL
      SELECT n.id, n.parent_id, n.skip_id, n.depth FROM hop h CROSS JOIN bounds b
        JOIN ${turns} n ON n.id = (CASE WHEN ((h.depth - 1) / ${JUMP}) * ${JUMP} >= b.hi AND h.skip_id IS NOT NULL THEN h.skip_id ELSE h.parent_id END)
        WHERE h.depth > b.hi),
    walk(id, parent_id, depth, created_at) AS (
      SELECT n.id, n.parent_id, n.depth, n.created_at FROM hop h CROSS JOIN bounds b JOIN ${turns} n ON n.id = h.id WHERE h.depth = b.hi
      UNION ALL
      SELECT n.id, n.parent_id, n.depth, n.created_at FROM walk w CROSS JOIN bounds b JOIN ${turns} n ON n.id = w.parent_id WHERE w.depth > b.lo)`;
}

/**
 * The SQL that sets `depth` and `skip_id` of every turn of the turns `scope` selects from its
 * roots down (the migration that adds them; an import, which may move a stored turn). `turns` is
 * the (qualified) table; `scope` a condition on its columns (e.g. "session = ?"); `noId` a null
 * of the id columns' type (PostgreSQL: with their collation).
 */
export function placesSql(turns: string, scope: string, noId = 'CAST(NULL AS TEXT)'): string {
  return `WITH RECURSIVE places(id, depth, skip_id) AS (
      SELECT id, 0, ${noId} FROM ${turns} WHERE parent_id IS NULL AND ${scope}
      UNION ALL
      SELECT t.id, p.depth + 1, CASE WHEN p.depth % ${JUMP} = 0 THEN p.id ELSE p.skip_id END FROM places p JOIN ${turns} t ON t.parent_id = p.id)
    UPDATE ${turns} AS u SET depth = places.depth, skip_id = places.skip_id FROM places WHERE u.id = places.id`;
}
