"""Where the float conv cores read their input rows and write their output rows: the whole NCHW
tensor (the layer-by-layer kernel) or a cascade's ring of rows (docs/architecture.md, "Cascades"), so
one core serves both.

A ring of ``R`` rows of a ``C x H x W`` value is laid out ``C x R x W``: row ``y`` of channel ``c``
sits at ``(c*R + y % R)*W``; the whole tensor is the case ``R = H`` (then no ``%`` is written).
A core forms the slot ``y % R`` once per row (``slot``) and adds ``channel`` and ``row`` offsets
to it, so the modulo never sits in an inner loop. The cascade's output side is a ``RowSink``: the
ring it stores into and the member's epilogue, C statements on a scalar ``v`` of channel ``c``,
row ``r`` and column ``i`` (``cascade.scalar_epilogue``). The int8 cascades' ``RowSource``
(``int8/im2col.py``) is the same idea over one-byte rows.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RowSource:
    """Rows of a float value at ``base``: ``channels`` channels of ``height`` rows of ``width``
    floats, of which ``rows`` are kept (``rows == height``: the whole tensor)."""

    base: str
    channels: int
    height: int
    width: int
    rows: int

    @property
    def whole(self) -> bool:
        return self.rows == self.height

    @property
    def plane(self) -> int:
        """Floats between two channels."""
        return self.rows * self.width

    def channel(self, n: str, c: str) -> str:
        """The pointer to channel ``c`` of image ``n`` (a ring holds one image)."""
        first = f"({n})*{self.channels} + {c}" if self.whole else c
        return f"{self.base} + ({first})*{self.plane}"

    def slot(self, y: str) -> str:
        """The kept row index of row ``y``: ``y`` itself, or ``y % R`` (form it once per row)."""
        return y if self.whole else f"({y}) % {self.rows}"

    def row(self, y: str) -> str:
        """The offset of row ``y`` within a channel."""
        return f"({self.slot(y)})*{self.width}"


@dataclass(frozen=True)
class RowSink:
    """The output rows of a cascade member: ring ``dst`` (``rows`` kept, rows ``width`` wide) and
    the epilogue statements applied to ``v`` before it is stored."""

    dst: RowSource
    epilogue: tuple[str, ...]
