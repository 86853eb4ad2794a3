"""Optional integrations that make a training run write the evidence rltriage reads.

Each submodule imports its framework lazily, so `import rltriage` never needs them.
"""
