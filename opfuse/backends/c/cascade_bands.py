"""A cascade's band loop in C (``cascade.py``'s ``emit_cascade`` opens it, then a ``switch`` on
the member): per band of the last member, the members that lack input rows run forward over the
rows they owe. The steps are either computed in the C from each member's window
(``open_pulled``: 3 numbers a member, where ``pulled_schedule``, the same walk in Python, equals
``opfuse.fusion.rings.band_schedule``'s table) or read from that table (``open_table``)."""

from __future__ import annotations

from opfuse.backends.c.cgen import CWriter
from opfuse.fusion.rings import Window


def pulled_schedule(windows: list[Window], heights: list[int],
                    band: int) -> list[tuple[int, int, int]]:
    """The steps ``open_pulled``'s C runs, in Python: per band of the last member, walk back
    while a member lacks input rows, then run those members forward. ``emit_cascade`` writes
    that C only where it equals ``band_schedule``'s table, which then stays out of flash."""
    n = len(windows)
    done = [heights[0]] + [0] * n
    steps = []
    for y0 in range(0, heights[n], band):
        need = [0] * n
        need[n - 1] = min(y0 + band, heights[n]) - 1
        lo = n - 1
        while lo > 0:
            win = windows[lo]
            need[lo - 1] = min(need[lo] * win.stride + win.extent - 1 - win.pad_top,
                               heights[lo] - 1)
            if need[lo - 1] < done[lo]:
                break
            lo -= 1
        for m in range(lo, n):
            steps.append((m, done[m + 1], need[m]))
            done[m + 1] = need[m] + 1
    return steps


def open_pulled(w: CWriter, windows: list[Window], heights: list[int], band: int) -> None:
    """The band loop computing its steps (``pulled_schedule``) from each member's window (stride,
    reach, last row: 3 numbers a member) instead of reading a table of 3 a step (ResNet-8's three
    cascades kept 520 bytes of steps in flash, person_detect's six 650), for a few instructions a
    band. Leaves ``switch (m)`` open, the member's rows in ``a`` .. ``b``."""
    n, last = len(windows), heights[-1]
    wins = [(win.stride, win.extent - 1 - win.pad_top, heights[i] - 1)
            for i, win in enumerate(windows)]
    ctype = next((name for name, bits in (("int8_t", 7), ("int16_t", 15))
                  if all(-(2**bits) <= v < 2**bits for t in wins for v in t)), "int")
    table = ", ".join(f"{{{s}, {o}, {h}}}" for s, o, h in wins)
    w(f"static const {ctype} cas_win[{n}][3] = {{{table}}};")
    # rows as uint16_t: gcc then knows a member's rows are not negative, so each ``r % R`` of
    # its ring addressing stays an unsigned modulo (int rows cost ResNet-8 200 bytes a cascade)
    rows = "uint16_t" if max(heights) < 2**16 else "int"
    w(f"{rows} cas_done[{n + 1}] = {{{', '.join([str(heights[0])] + ['0'] * n)}}};")
    w.open(f"for (int cas_y = 0; cas_y < {last}; cas_y += {band})")
    w(f"{rows} cas_need[{n}];")
    w(f"int cas_lo = {n - 1};")
    w(f"cas_need[{n - 1}] = cas_y + {band - 1};" if last % band == 0 else
      f"cas_need[{n - 1}] = (cas_y + {band} < {last} ? cas_y + {band} : {last}) - 1;")
    w.open("for (; cas_lo > 0; --cas_lo)")  # back while member cas_lo lacks rows of its input
    w("const int top = cas_need[cas_lo]*cas_win[cas_lo][0] + cas_win[cas_lo][1];")
    w(f"cas_need[cas_lo - 1] = ({rows})(top < cas_win[cas_lo][2] ? top : cas_win[cas_lo][2]);")
    w("if (cas_need[cas_lo - 1] < cas_done[cas_lo]) break;")
    w.close()
    w.open(f"for (int cas_m = cas_lo; cas_m < {n}; ++cas_m)")
    # the member index opaque to gcc: knowing it, gcc copied the loop's head into the end of
    # every member (jump threading), 100-200 bytes a cascade, more than the table it replaces
    w("int m = cas_m;")
    w("#if defined(__GNUC__)")
    w('__asm__ ("" : "+r" (m));')
    w("#endif")
    w("const int a = cas_done[m + 1], b = cas_need[m];")
    w(f"cas_done[m + 1] = ({rows})(b + 1);")
    w.open("switch (m)")


def open_table(w: CWriter, steps: list[tuple[int, int, int]]) -> None:
    """The steps as a table (``open_pulled``'s fallback), ``switch`` left open likewise."""
    # the narrowest type that holds the table: in flash it is 12 bytes a step as int (ResNet-8's
    # three cascades: 1,980 bytes, 1.6% of its flash), 3 as uint8_t; the loads are as many
    top = max((max(step) for step in steps), default=0)
    ctype = "uint8_t" if top <= 0xFF else "uint16_t" if top <= 0xFFFF else "int"
    w(f"static const {ctype} steps[{len(steps)}][3] = {{")
    for i in range(0, len(steps), 8):
        w("    " + " ".join(f"{{{s}, {a}, {b}}}," for s, a, b in steps[i : i + 8]))
    w("};")
    w.open("")  # the band loop's scope, as open_pulled has
    w.open(f"for (int t = 0; t < {len(steps)}; ++t)")
    w("const int a = steps[t][1], b = steps[t][2];")
    w.open("switch (steps[t][0])")
