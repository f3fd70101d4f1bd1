"""Permutation and padding arithmetic for the NHWC -> NCHW import (docs/architecture.md,
"Layout of TFLite models").

A tensor's IR value is ``tflite_tensor.transpose(layout)``: ``layout`` lists, for every IR axis, the
TFLite axis it holds. Rank-4 activations that conv-like ops produce have layout NCHW = (0, 3, 1, 2);
everything else starts as the identity.
"""

from __future__ import annotations

NCHW = (0, 3, 1, 2)


def identity(rank: int) -> tuple[int, ...]:
    return tuple(range(rank))


def inverse(perm: tuple[int, ...]) -> tuple[int, ...]:
    out = [0] * len(perm)
    for i, p in enumerate(perm):
        out[p] = i
    return tuple(out)


def compose(first: tuple[int, ...], then: tuple[int, ...]) -> tuple[int, ...]:
    """The perm of ``x.transpose(first).transpose(then)`` as one transpose of ``x``."""
    return tuple(first[i] for i in then)


def between(src: tuple[int, ...], dst: tuple[int, ...]) -> tuple[int, ...]:
    """The perm taking a value in layout ``src`` to layout ``dst``."""
    return compose(inverse(src), dst)


def permute(shape: tuple[int, ...], perm: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(shape[p] for p in perm)


def moves_only_unit_axes(shape: tuple[int, ...], perm: tuple[int, ...]) -> bool:
    """True when transposing ``shape`` by ``perm`` keeps the element order (a Reshape)."""
    big = [p for p in perm if shape[p] != 1]
    return big == sorted(big)


def same_pads(size: int, kernel: int, stride: int, dilation: int) -> tuple[int, int]:
    """TFLite's SAME padding: output ceil(size / stride); the odd pixel of the total goes after."""
    effective = (kernel - 1) * dilation + 1
    out = (size + stride - 1) // stride
    total = max((out - 1) * stride + effective - size, 0)
    return total // 2, total - total // 2


def conv_pads(
    padding: int, spatial: tuple[int, int], kernel: tuple[int, int], stride: tuple[int, int],
    dilation: tuple[int, int] = (1, 1),
) -> list[int]:
    """ONNX ``pads`` [top, left, bottom, right] for TFLite padding code 0 (SAME) or 1 (VALID)."""
    if padding != 0:
        return [0, 0, 0, 0]
    (top, bottom), (left, right) = (same_pads(spatial[i], kernel[i], stride[i], dilation[i]) for i in (0, 1))
    return [top, left, bottom, right]
