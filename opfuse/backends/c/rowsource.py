"""Where a conv core reads its input rows and writes its output rows, float or int8: the whole
NCHW tensor (the layer-by-layer kernel) or a cascade's ring of rows (docs/architecture.md,
"Cascades"), so one core serves both; or a whole NHWC tensor, a TFLite model's graph input read in
place by its first conv (``RowSource.nhwc``: pixels ``channels`` elements apart, channels 1,
fusion/views.py). The one writer of row and ring addressing: a core that reads columns through
``col`` reads either layout.

A ring of ``R`` rows of a ``C x H x W`` value is laid out ``C x R x W``: row ``y`` of channel ``c``
sits at ``(c*R + y % R)*W``; the whole tensor keeps every row (then no ``%`` is written). A core
forms the slot ``y % R`` once per row (``slot``) and adds ``channel`` and ``row`` offsets to it,
so the modulo never sits in an inner loop. In a shared int8 member function (int8/cascade.py) the
rows kept and the channel stride are C expressions, its arguments. The cascade's output side is
a ``RowSink``: the ring it stores into and the member's epilogue, C statements on a scalar ``v``
of channel ``c``, row ``r`` and column ``i`` (``cascade.scalar_epilogue``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RowSource:
    """Rows of a value at ``base``, ``width`` elements each, channels ``stride`` elements apart;
    a ring keeps ``ring`` rows (row y in slot y % ring), the whole tensor (``ring`` None) every
    row. ``channels``: the channels of one image (``channel(n, c)`` of a whole tensor of several
    images); ``stride_max``: the largest stride where it is a C expression. ``pixel``: the
    elements between neighbouring columns (1 in NCHW; in NHWC the channels, ``width`` then the
    row pitch ``W*C`` and ``image`` the elements of one image)."""

    base: str
    width: int
    stride: int | str
    ring: int | str | None = None
    channels: int = 1
    stride_max: int | None = None
    pixel: int = 1
    image: int | None = None

    @classmethod
    def of(cls, base: str, channels: int, height: int, width: int,
           rows: int | str | None = None) -> RowSource:
        """A ``channels x height x width`` value of which ``rows`` are kept (None or ``height``:
        the whole tensor)."""
        ring = None if rows is None or rows == height else rows
        kept = height if ring is None else ring
        stride = kept * width if isinstance(kept, int) else f"{kept}*{width}"
        return cls(base, width, stride, ring, channels)

    @classmethod
    def nhwc(cls, base: str, channels: int, height: int, width: int) -> RowSource:
        """A whole ``height x width x channels`` value (TFLite's layout), read in place."""
        return cls(base, width * channels, 1, None, channels, pixel=channels,
                   image=height * width * channels)

    @property
    def is_nhwc(self) -> bool:
        return self.pixel != 1

    @property
    def whole(self) -> bool:
        return self.ring is None

    @property
    def rows(self) -> int | str:
        """The rows kept per channel."""
        if self.ring is not None:
            return self.ring
        return self.stride // self.width if isinstance(self.stride, int) else self.stride

    def channel(self, n: str, c: str) -> str:
        """The pointer to channel ``c`` of image ``n`` (a ring holds one image)."""
        if self.image is not None:
            return f"{self.base} + ({n})*{self.image} + ({c})"
        first = f"({n})*{self.channels} + {c}" if self.whole else c
        return f"{self.base} + ({first})*{self.stride}"

    def slot(self, y: str) -> str:
        """The kept row index of row ``y``: ``y`` itself, or ``y % R`` (form it once per row)."""
        return y if self.whole else f"({y}) % {self.ring}"

    def row(self, y: str) -> str:
        """The offset of row ``y`` within a channel."""
        return f"({self.slot(y)})*{self.width}"

    def col(self, x: str | int) -> str:
        """The offset of column ``x`` within a row (``x`` a C name, a parenthesized expression
        or a number)."""
        return str(x) if self.pixel == 1 else f"({x})*{self.pixel}"


# A cascade member's own spellings (cascade.py, cascade_rows.py, convrows.py, cascade_pool.py,
# int8/cascade.py): a member does not know whether its value is a ring or kept whole, and
# ``y % H`` is ``y``. ``y`` is a C name or a parenthesized expression.


def ring_slot(y: str, rows: int | str) -> str:
    """The slot of row ``y`` in a value kept as ``rows`` rows."""
    return f"{y} % {rows}"


def ring_offset(c: str, y: str, rows: int | str, width: int) -> str:
    """The offset of row ``y`` of channel ``c`` in a value kept as ``rows`` rows."""
    return f"({c}*{rows} + {ring_slot(y, rows)})*{width}"


def member_row(base: str, c: str, slot: str, rows: int | str, width: int) -> str:
    """The pointer to the row in slot ``slot`` (``ring_slot``, formed once) of channel ``c``."""
    return f"{base} + ({c}*{rows} + {slot})*{width}"


def ring_row(base: str, c: str, y: str, rows: int | str, width: int) -> str:
    """The pointer to row ``y`` of channel ``c`` of a value kept as ``rows`` rows."""
    return f"{base} + {ring_offset(c, y, rows, width)}"


def channel_row(channel: str, y: str, rows: int | str, width: int, whole: bool) -> str:
    """The pointer to row ``y`` from a channel's pointer ``channel``: ``y`` itself where the value
    is kept whole, its slot in the ring else."""
    return f"{channel} + {y}*{width}" if whole else f"{channel} + ({ring_slot(y, rows)})*{width}"


@dataclass(frozen=True)
class RowSink:
    """The output rows of a cascade member: ring ``dst`` (``rows`` kept, rows ``width`` wide) and
    the epilogue statements applied to ``v`` before it is stored."""

    dst: RowSource
    epilogue: tuple[str, ...]
