// The range of every count the service stores (token counts and the totals made of them), and
// what a stored number out of it is taken as: a count is a whole number from 0 to 2^53 - 1, the
// largest a JSON reader that uses doubles reads exactly; a total saturates there.

/** The largest count and total: 2^53 - 1 (Number.MAX_SAFE_INTEGER). */
export const COUNT_MAX = Number.MAX_SAFE_INTEGER;

/** Whether `v` is a count: a whole number from 0 to COUNT_MAX. */
export function isCount(v: unknown): v is number {
  return Number.isSafeInteger(v) && (v as number) >= 0;
}

/**
 * `v` taken into the range of a count: a total past the top is the top, a fraction is rounded
 * down, anything below 0 or not a number is 0. What a stored number that no write of this
 * release makes is read as.
 */
export function countIn(v: number): number {
  if (!(v > 0)) return 0;
  return v >= COUNT_MAX ? COUNT_MAX : Math.floor(v);
}
