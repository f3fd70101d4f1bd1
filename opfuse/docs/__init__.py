"""Pages generated from the code itself (docs/architecture.md, "Named constraints"):
``supported_ops`` renders docs/supported_ops.md from the op registry, the named constraints and
the built-in target files. ``python -m opfuse.docs --write docs/supported_ops.md`` regenerates it.
"""
