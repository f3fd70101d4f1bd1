"""The op table (opfuse/ops.py) knows every op the C backend has a kernel for: an op the C can run
but the table does not know is opaque to fusion and costs 0 FLOPs, so its kernels would be
mis-partitioned and mis-counted (ReduceMin was, until this test)."""

from __future__ import annotations

from opfuse import ops
from opfuse.backends.c.kernels import COVERED

# Constant has a C kernel (it writes its value) but no fusion kind: canonicalization folds it into
# an initializer, and an unfolded one stays its own kernel.
NOT_IN_TABLE = {"Constant"}


def test_every_op_with_a_c_kernel_is_in_the_op_table() -> None:
    assert COVERED - set(ops.OPS) == NOT_IN_TABLE


def test_reducemin_is_a_reduction() -> None:
    assert ops.OPS["ReduceMin"].kind == ops.OPS["ReduceMax"].kind == ops.OpKind.REDUCE
