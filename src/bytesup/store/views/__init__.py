"""The views of the lessons: one module per lesson (`lesson08`), holding its tables, notes and plots.

A view renders the records a lesson's arithmetic returned, by their declared columns (`store.rows.column`); it
records nothing and measures nothing, so a replay renders the same page from the same records."""
