"""The sweep stage: many models x targets x precisions, one flat row each, run in local worker
processes or on a Ray cluster. It sits above the compiler and calls only its public API
(``opfuse.api``: compile, analyze, emulate_c); see docs/architecture.md, "Sweep".

    from opfuse.sweep import sweep
    rows = sweep(["mobilenet_v2", "models/"], targets="cortex-m4,cortex-m7", jobs=2)
    rows[0]["fits_ram"], rows[0]["latency_s"]

``sweep`` returns plain dicts (columns: ``opfuse.sweep.schema.COLUMNS``);
``opfuse.sweep.output.to_arrow(rows)`` gives an Arrow table.
"""

from __future__ import annotations

from collections.abc import Iterable

from opfuse.sweep.schema import COLUMNS, PRECISIONS

__all__ = ["COLUMNS", "PRECISIONS", "sweep"]


def sweep(
    models: Iterable[str],
    targets: str | Iterable[str] = "all",
    precisions: str | Iterable[str] = PRECISIONS,
    emulate: bool = False,
    jobs: int | None = None,
    ray: str | None = None,
    timeout_s: float = 300.0,
    calibration: str | None = None,
) -> list[dict]:
    """The rows of every (model, target, precision), sorted by key. ``models``: files, folders
    or built-in names; ``ray``: None (local processes), ``"local"`` or a cluster address;
    ``calibration``: DATA that makes a float model's int8 row a real int8 build."""
    from opfuse.sweep.inputs import calibration_ref, model_refs, parse_precisions, target_refs
    from opfuse.sweep.run import default_jobs, plan, run

    target_spec = targets if isinstance(targets, str) else ",".join(targets)
    prec_spec = precisions if isinstance(precisions, str) else ",".join(precisions)
    cal = None if calibration is None else calibration_ref(calibration)
    tasks = plan(model_refs(list(models)), target_refs(target_spec), parse_precisions(prec_spec),
                 emulate, timeout_s, calibration=cal)
    outcome = run(tasks, jobs or default_jobs(), ray, {})
    if outcome.interrupted:
        raise KeyboardInterrupt
    return list(outcome.rows)
