"""The rows of the tables lessons write, typed: one module per lesson (`lesson05`), like `store.facts`. Each row is a
dataclass whose fields are the table's columns in order (`store.rows.column`), built from the course's records by a
function beside it; a lesson passes `columns(Row)` and `cells(rows)` to `ctx.table`. A lesson whose rows fit beside
its computation keeps them there; these are for a lesson that would otherwise not read in one sitting."""
