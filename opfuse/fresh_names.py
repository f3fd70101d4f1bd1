"""A name no value, node or initializer of a graph holds yet: what every rewrite that adds to an
ONNX graph (the TFLite reader, QOperator and QDQ rewriting, quantization, the integer-sum
reference) needs, spelled once. It imports nothing of opfuse, so every stage may use it."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, numpy_helper


def fresh_name(taken: set[str], base: str) -> str:
    """``base``, or ``base_2``, ``base_3``, ... : the first not in ``taken``, which it joins."""
    name, i = base, 1
    while name in taken:
        i += 1
        name = f"{base}_{i}"
    taken.add(name)
    return name


class GraphAdditions:
    """The names a rewrite has taken and the initializers it adds (``new_inits``, for the caller
    to append to the graph)."""

    def __init__(self, taken: set[str]) -> None:
        self.taken = taken
        self.new_inits: list[TensorProto] = []

    def fresh(self, base: str) -> str:
        return fresh_name(self.taken, base)

    def const(self, base: str, array: np.ndarray) -> str:
        """A new initializer holding ``array``, under a fresh name made from ``base``."""
        name = self.fresh(base)
        self.new_inits.append(numpy_helper.from_array(array, name))
        return name
