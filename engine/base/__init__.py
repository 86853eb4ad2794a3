"""What every layer shares: the vocabulary, value coercions, errors, the output contract and the
stage-marker format. Imports nothing else of rltriage."""
