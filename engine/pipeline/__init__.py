"""The stages of one diagnosis: read → scan → facts → infer → rank → assemble → render → redact."""
