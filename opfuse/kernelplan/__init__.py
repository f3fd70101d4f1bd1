"""What the generated kernels do, as pure data from a node's geometry: the template path, the
register blocks and tiles, the SIMD groups (docs/architecture.md, "Kernel plans"). Read by the C
backend's emitters and support predicates and by the cost model, which may not import a backend:
one place decides, so the three never disagree."""
