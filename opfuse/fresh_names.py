"""A name no value, node or initializer of a graph holds yet: what every rewrite that adds to an
ONNX graph (the TFLite reader, QOperator and QDQ rewriting, quantization, the integer-sum
reference) needs, spelled once. It imports nothing of opfuse, so every stage may use it."""

from __future__ import annotations


def fresh_name(taken: set[str], base: str) -> str:
    """``base``, or ``base_2``, ``base_3``, ... : the first not in ``taken``, which it joins."""
    name, i = base, 1
    while name in taken:
        i += 1
        name = f"{base}_{i}"
    taken.add(name)
    return name
