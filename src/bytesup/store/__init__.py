"""Results and runs as records: the lesson result and its schema, run folders read back, what identifies a run,
escaping, the one renderer (Markdown and HTML), plots, table rows as named records (in `tables`, a lesson's rows
that would not fit beside it), and the parts of older runs that moved to another lesson. Imports llama and the
layers below it."""
