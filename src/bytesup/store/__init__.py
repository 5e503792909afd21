"""Results and runs as records: the lesson result and its schema, run folders read back, what identifies a run,
escaping, the one renderer (Markdown and HTML) and plots. Imports llama and the layers below it."""
