// What a query of the PostgreSQL client takes and answers: its parameters, each in PostgreSQL's
// text format or null, and its result: the column names, the rows, and the command tag's verb and count.
export type Param = string | null;
export type Row = (string | null)[];

export interface QueryResult {
  /** Column names, in order; shared by every result of the same statement: do not modify. */
  readonly fields: readonly string[];
  /** Every value in PostgreSQL's text format, or null. */
  readonly rows: Row[];
  /** The command tag's verb: SELECT, INSERT, UPDATE, BEGIN... */
  readonly command: string;
  /** Rows selected, inserted, updated or deleted, from the command tag. */
  readonly rowCount: number;
}
