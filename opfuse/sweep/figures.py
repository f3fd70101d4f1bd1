"""A sweep row's figures from the compiler's results: analyze's before/after sides and deployment
verdict (``opfuse.analysis``), the ranked refusals (``opfuse.report.refusals``) and, with
``--emulate``, the QEMU run of ``validate --backend c --emulate`` (``opfuse.api.emulate_c``)."""

from __future__ import annotations

from collections.abc import Callable

from opfuse.sweep.schema import blank_row

TOP_REFUSALS = 3


def _clean(text: str, limit: int = 40) -> str:
    """An op name from the model, safe to show: printable, short."""
    text = "".join(c if c.isprintable() and c not in ";" else "?" for c in str(text))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def top_refusals(result, precision: str) -> tuple[int, str]:  # noqa: ANN001 (CompileResult)
    """(edges left unfused, the first TOP_REFUSALS actionable groups as one string)."""
    from opfuse.report.refusals import ranked_refusals

    refused = sum(1 for d in result.partition.decisions if not d.fused)
    ranked = ranked_refusals(result, precision)
    # the ones worth acting on first; then those the target's one-anchor design makes certain
    groups = [(g, "") for g in ranked["actionable"]] + [(g, " (one anchor)")
                                                        for g in ranked["expected"]]
    parts = []
    for g, why in groups[:TOP_REFUSALS]:
        reason = next(iter(g["reasons"]), "")
        parts.append(f"{_clean(g['producer_op'])}->{_clean(g['consumer_op'])} {_clean(reason)} "
                     f"x{g['count']}{why}")
    return refused, "; ".join(parts)


def own_precision(result) -> tuple[bool, str]:  # noqa: ANN001
    """(whether the model is quantized, the precision it stores)."""
    from opfuse.cost.precision import model_precision
    from opfuse.quant import is_quantized

    return is_quantized(result.original), model_precision(result.original)


def precision_row(result, precision: str, base: dict) -> dict:  # noqa: ANN001
    """The row of one precision: skipped where it does not apply (module docstring of
    ``opfuse.sweep.tasks``), else analyze's figures."""
    from opfuse import api

    quantized, own = own_precision(result)
    target = result.target
    if quantized and precision != own:
        return blank_row(**base, precision=precision, status="skipped", precision_used=own,
                         precision_note=f"a quantized model is costed at its own dtypes "
                         f"({own}): see its {own} row")
    if not quantized and precision not in target.precisions:
        return blank_row(**base, precision=precision, status="skipped",
                         precision_note=f"{target.name} does not run {precision} (it runs "
                         f"{', '.join(target.precisions)})")
    a = api.analyze(result, precision=None if quantized else precision)
    before, after = a.before.to_json(), a.after.to_json()
    dep = a.deployment_json("after")
    refused, top = top_refusals(result, a.precision)
    return blank_row(
        **base, precision=precision, status="ok", precision_used=a.precision,
        precision_note=a.precision_note,
        kernels_before=before["kernels"], kernels_after=after["kernels"],
        traffic_before_bytes=before["traffic_bytes"], traffic_after_bytes=after["traffic_bytes"],
        macs=after["macs"], peak_arena_bytes=after["peak_arena_bytes"],
        layer_by_layer_bound_bytes=after["layer_by_layer_lower_bound_bytes"],
        weight_bytes=dep["weight_bytes"], ram_bytes=dep["ram_bytes"], fits_ram=dep["fits_ram"],
        ram_margin_bytes=dep["ram_margin_bytes"], flash_bytes=dep["flash_bytes"],
        fits_flash=dep["fits_flash"], flash_margin_bytes=dep["flash_margin_bytes"],
        latency_before_s=before["latency_s"], latency_s=after["latency_s"],
        energy_j=after["energy_j"], bound=dep["time"]["bound"],
        unknown_sizes=bool(after["unknown_bytes_tensors"]), refused_edges=refused,
        top_refusals=top,
    )


def emulated_precision(result) -> str:  # noqa: ANN001
    """The precision the C backend builds: the model's own integers, else float32."""
    quantized, own = own_precision(result)
    return own if quantized else "fp32"


def _boarded() -> list[str]:
    from opfuse.targets import list_targets, load_target

    return [n for n in list_targets() if load_target(n).board is not None]


def emulation_figures(source: str, target, result, rows: list[dict], timeout_s: float,  # noqa: ANN001
                      message: Callable[[BaseException], str],
                      input_shape: tuple[str, ...] = (),
                      input_value: tuple[str, ...] = (), int8_source: str | None = None
                      ) -> list[dict]:
    """``rows`` with the emulation columns: measured on the row the C backend builds (and on the
    int8 row of ``int8_source``, the model quantized by ``--calibration``), "not run" with the
    reason on the others."""
    built = emulated_precision(result)
    board = target.board is not None
    out = []
    for row in rows:
        if row["status"] != "ok":
            out.append(row | {"emu_verdict": "not run", "emu_note": f"the row is {row['status']}"})
        elif not board:
            out.append(row | {"emu_verdict": "not run", "emu_note": f"{target.name} has no "
                              f"emulated board ({', '.join(_boarded())} have one)"})
        elif row["precision"] == "int8" and int8_source is not None and row["calibration"]:
            out.append(row | _emulate(int8_source, target, timeout_s, message))
        elif row["precision"] != built:
            out.append(row | {"emu_verdict": "not run", "emu_note": f"the C backend builds this "
                              f"model in {built}: see its {built} row"})
        else:
            out.append(row | _emulate(source, target, timeout_s, message, input_shape, input_value))
    return out


def _emulate(source: str, target, timeout_s: float,  # noqa: ANN001
             message: Callable[[BaseException], str], input_shape: tuple[str, ...] = (),
             input_value: tuple[str, ...] = ()) -> dict:
    from opfuse import api

    try:
        emu = api.emulate_c(source, target, timeout_s=timeout_s, input_shape=input_shape or None,
                            input_value=input_value or None)
    except Exception as exc:  # noqa: BLE001 (the row keeps its predicted figures)
        return {"emu_verdict": "error", "emu_note": message(exc)}
    worst = max((o.max_abs_err for o in emu.report.outputs), default=0.0)
    verdict = ("mismatch" if not emu.report.ok
               else "bit-exact" if worst == 0.0 else "within tolerance")
    fp = emu.footprint
    return {"emu_verdict": verdict, "emu_note": None, "emu_instructions": int(emu.instructions),
            "emu_flash_bytes": fp.flash, "emu_ram_bytes": fp.ram, "emu_arena_bytes": fp.arena,
            "emu_max_abs_err": float(worst)}
