"""A run's inputs: the file-type table, the folder walker, archives, discovery and classification,
line normalisation and stack dumps."""
