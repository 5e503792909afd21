"""The models the lessons run on: the GGUF reader, the catalog (the real default and the synthetic presets),
SmolLM2 from the package index at four widths, and the forward pass in numpy. Imports only the leaves."""
