"""Validation: what opfuse produced (ONNX or C), run beside a reference on the same inputs, every
output compared (docs/architecture.md, "Measurement")."""
