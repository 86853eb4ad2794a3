"""The knowledge base as data: file models, YAML with positions, the loader, the compiled program
and the load-time checks."""
