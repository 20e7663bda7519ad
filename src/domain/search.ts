// Case folding for finding sessions by name, the same on every engine: the text searched and
// the text searched for are folded alike, and a match is a plain substring of the folded name.

/** The folded form of a name or of a search text. */
export function foldForSearch(text: string): string {
  return text.toLowerCase();
}
