"""A seeded, bounded mutation fuzzer for the `opfuse` command over real model protobufs.

Each case mutates one seed model (a built-in, or one of the exporter-style models that
tests/exports.py builds), writes it to a file, and runs `opfuse compile FILE -o OUT` and then
`opfuse analyze FILE --json OUT` in a forked child with a timeout. Every run must end with exit 0,
1 or 2, an error as one line with no traceback, and no half-written output (an output file only
when the command succeeded, and then a readable one; no temporary file left behind).

    PYTHONPATH=$PWD python benchmarks/fuzz.py [--cases 10000] [--seed 0] [--timeout 20] [--all]

prints the counts by outcome and the first cases of every bad outcome (reproduce one with
``--only CASE``). tests/test_fuzz.py runs a few hundred cases of the same fuzzer in CI.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import select
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import onnx
from google.protobuf.descriptor import FieldDescriptor

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

GOOD = ("ok", "exit1", "rejected")  # exit 0, exit 1, exit 2 with one line
BAD = ("traceback", "hang", "crash", "half_written", "bad_exit")
SMALL_SEEDS = ("seed_block", "ds_cnn", "tiny_transformer", "paddle_style", "custom_op",
               "control_flow_if", "control_flow_loop", "control_flow_scan")
LARGE_SEEDS = ("seed_pipeline", "mobilenet_v2", "resnet18")


def seed_protos(names: tuple[str, ...] = SMALL_SEEDS) -> dict[str, bytes]:
    """Serialized seed models by name."""
    from opfuse import models
    from tests import exports

    builders: dict[str, Callable[[], onnx.ModelProto]] = {
        "paddle_style": exports.paddle_style,
        "custom_op": exports.custom_op,
        "control_flow_if": lambda: exports.control_flow("If"),
        "control_flow_loop": lambda: exports.control_flow("Loop"),
        "control_flow_scan": lambda: exports.control_flow("Scan"),
    }
    out = {}
    for name in names:
        proto = builders[name]() if name in builders else models.build_model(name)
        out[name] = proto.SerializeToString(deterministic=True)
    return out


# --- mutations ------------------------------------------------------------------------------

EDGE_INTS = (0, -1, 1, 2, 3, -2, 7, 99, -99, 2**31 - 1, -(2**31), 2**62, 2**63 - 1)
EDGE_FLOATS = (0.0, -1.0, 1e30, -1e30, float("nan"), float("inf"), 1e-30)


def _repeated(field: FieldDescriptor) -> bool:
    flag = getattr(field, "is_repeated", None)  # protobuf >= 5; older ones have ``label``
    return bool(flag) if flag is not None else field.label == FieldDescriptor.LABEL_REPEATED


def _messages(msg, path: str = ""):
    """(path, message) for ``msg`` and every message inside it."""
    yield path, msg
    for field, value in msg.ListFields():
        if field.type != FieldDescriptor.TYPE_MESSAGE:
            continue
        if _repeated(field):
            for i, item in enumerate(value):
                yield from _messages(item, f"{path}.{field.name}[{i}]")
        else:
            yield from _messages(value, f"{path}.{field.name}")


def _edge_scalar(field: FieldDescriptor, rng: random.Random):
    t = field.type
    if t in (FieldDescriptor.TYPE_FLOAT, FieldDescriptor.TYPE_DOUBLE):
        return rng.choice(EDGE_FLOATS)
    if t == FieldDescriptor.TYPE_BOOL:
        return rng.random() < 0.5
    if t == FieldDescriptor.TYPE_STRING:
        return rng.choice(["", "x", "a" * 300, "..", "/etc/passwd", "\u00e9", "w1"])
    if t == FieldDescriptor.TYPE_BYTES:
        return bytes(rng.randrange(256) for _ in range(rng.choice((0, 1, 3, 17))))
    if t == FieldDescriptor.TYPE_ENUM:
        return rng.choice([v.number for v in field.enum_type.values] + [0])
    value = rng.choice(EDGE_INTS)
    if t in (FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_FIXED32,
             FieldDescriptor.TYPE_FIXED64):
        value = abs(value)
    if t in (FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_SINT32, FieldDescriptor.TYPE_SFIXED32,
             FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_FIXED32):
        value = max(min(value, 2**31 - 1), -(2**31)) if value < 2**32 else 2**31 - 1
        if t in (FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_FIXED32):
            value = abs(value)
    return value


def mutate_field(proto: onnx.ModelProto, rng: random.Random) -> str:
    """Delete, duplicate or set one field somewhere in the model."""
    path, msg = rng.choice(list(_messages(proto)))
    fields = [f for f in msg.DESCRIPTOR.fields]
    if not fields:
        return "noop"
    field = rng.choice(fields)
    where = f"{path}.{field.name}"
    if _repeated(field):
        items = getattr(msg, field.name)
        if not len(items):
            return f"empty {where}"
        i = rng.randrange(len(items))
        action = rng.choice(("delete", "duplicate", "set"))
        if action == "delete":
            del items[i]
        elif action == "duplicate":
            if field.type == FieldDescriptor.TYPE_MESSAGE:
                items.add().CopyFrom(items[i])
            else:
                items.append(items[i])
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            items[i].Clear()
        else:
            items[i] = _edge_scalar(field, rng)
        return f"{action} {where}[{i}]"
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        msg.ClearField(field.name)
        return f"clear {where}"
    if rng.random() < 0.3:
        msg.ClearField(field.name)
        return f"clear {where}"
    setattr(msg, field.name, _edge_scalar(field, rng))
    return f"set {where}"


def mutate_attribute(proto: onnx.ModelProto, rng: random.Random) -> str:
    """An out-of-range attribute: axis 99, stride 0, negative pads, group 0, perm out of range."""
    nodes = [n for n in proto.graph.node if n.attribute]
    if not nodes:
        return "noop"
    node = rng.choice(nodes)
    attr = rng.choice(list(node.attribute))
    if attr.type == onnx.AttributeProto.INT:
        attr.i = rng.choice(EDGE_INTS)
    elif attr.type == onnx.AttributeProto.INTS and len(attr.ints):
        attr.ints[rng.randrange(len(attr.ints))] = rng.choice(EDGE_INTS)
        if rng.random() < 0.3:
            attr.ints.append(rng.choice(EDGE_INTS))
    elif attr.type == onnx.AttributeProto.FLOAT:
        attr.f = rng.choice(EDGE_FLOATS)
    elif attr.type == onnx.AttributeProto.STRING:
        attr.s = rng.choice([b"", b"NOPE", b"SAME_UPPER", b"\xff"])
    else:
        attr.type = rng.choice([t for t in range(1, 14) if t != attr.type])
    return f"attribute {node.name}.{attr.name}"


def short_tensor(proto: onnx.ModelProto, rng: random.Random) -> str:
    """An initializer whose data is shorter (or longer) than its shape says."""
    inits = list(proto.graph.initializer)
    if not inits:
        return "noop"
    t = rng.choice(inits)
    if t.raw_data:
        cut = rng.randrange(len(t.raw_data))
        t.raw_data = t.raw_data[:cut] if rng.random() < 0.8 else t.raw_data + b"\0" * 7
    elif len(t.float_data):
        del t.float_data[rng.randrange(len(t.float_data)):]
    elif len(t.int64_data):
        del t.int64_data[rng.randrange(len(t.int64_data)):]
    elif len(t.dims):
        t.dims[rng.randrange(len(t.dims))] += rng.choice((1, 5, 1000))
    return f"short tensor {t.name}"


def shadow_input(proto: onnx.ModelProto, rng: random.Random) -> str:
    """An initializer with the name of a graph input (of the same or of another shape)."""
    graph = proto.graph
    if not graph.input:
        return "noop"
    vi = rng.choice(list(graph.input))
    dims = [d.dim_value if d.dim_value > 0 else 1 for d in vi.type.tensor_type.shape.dim]
    if rng.random() < 0.5 and dims:
        dims[-1] += 1
    n = 1
    for d in dims:
        n *= d
    n = min(n, 1 << 20)
    t = onnx.helper.make_tensor(vi.name, onnx.TensorProto.FLOAT, dims if n < (1 << 20) else [n],
                                [0.5] * n)
    graph.initializer.append(t)
    return f"shadow input {vi.name}"


def rename_collision(proto: onnx.ModelProto, rng: random.Random) -> str:
    """Two nodes writing the same value, or a node reading a value nothing writes."""
    nodes = list(proto.graph.node)
    if len(nodes) < 2:
        return "noop"
    a, b = rng.sample(nodes, 2)
    if rng.random() < 0.5 and a.output and b.output:
        b.output[0] = a.output[0]
        return f"collide {b.name}->{a.output[0]}"
    if a.input:
        a.input[rng.randrange(len(a.input))] = rng.choice(["ghost", "", b.output[0] if b.output
                                                           else "ghost"])
    return f"rewire {a.name}"


STRUCTURED = (mutate_field, mutate_field, mutate_attribute, short_tensor, shadow_input,
              rename_collision)


def mutate(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    """One case: the mutated bytes and what was done."""
    kind = rng.random()
    if kind < 0.15:  # bit flips
        buf = bytearray(data)
        flips = rng.randint(1, 8)
        for _ in range(flips):
            i = rng.randrange(len(buf))
            buf[i] ^= 1 << rng.randrange(8)
        return bytes(buf), f"flip {flips} bits"
    if kind < 0.25:  # truncation
        cut = rng.randrange(len(data))
        return data[:cut], f"truncate at {cut}/{len(data)}"
    proto = onnx.ModelProto()
    proto.ParseFromString(data)
    steps = [rng.choice(STRUCTURED)(proto, rng) for _ in range(rng.choice((1, 1, 1, 2, 3)))]
    return proto.SerializeToString(), "; ".join(steps)


# --- running one case -----------------------------------------------------------------------

@dataclass(frozen=True)
class Outcome:
    kind: str  # one of GOOD or BAD
    detail: str  # the command and its last stderr line, for the report


def _child(argv: list[str], write_fd: int) -> None:
    """Run the CLI in this (forked) process; report (exit code, stderr) on ``write_fd``."""
    from opfuse.cli import main

    err = io.StringIO()
    sys.stdout = io.StringIO()
    sys.stderr = err
    code = 0
    try:
        main(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # an escaped exception: what the fuzzer is here to find
        import traceback

        traceback.print_exc(file=err)
        code = 99
    payload = json.dumps({"code": code, "err": err.getvalue()[-4000:]}).encode()
    os.write(write_fd, payload)
    os._exit(0)


def run_cli_forked(argv: list[str], timeout: float) -> tuple[int | None, str, str]:
    """(exit code or None, stderr, status) of the CLI run in a forked child: status is
    'done', 'hang' or 'crash' (the child died without reporting)."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        try:
            _child(argv, write_fd)
        finally:
            os._exit(3)
    os.close(write_fd)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    status = "done"
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            os.kill(pid, signal.SIGKILL)
            status = "hang"
            break
        ready, _, _ = select.select([read_fd], [], [], left)
        if ready:
            chunk = os.read(read_fd, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    os.close(read_fd)
    _, wstatus = os.waitpid(pid, 0)
    if status == "hang":
        return None, "", "hang"
    try:
        report = json.loads(b"".join(chunks))
    except ValueError:
        sig = os.WTERMSIG(wstatus) if os.WIFSIGNALED(wstatus) else None
        return None, f"child died (signal {sig})", "crash"
    return report["code"], report["err"], "done"


def _leftovers(folder: Path, keep: str) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name not in (keep, "model.onnx"))


def _check_output(path: Path, reader: Callable[[bytes], object]) -> bool:
    try:
        reader(path.read_bytes())
        return True
    except Exception:
        return False


def _parse_onnx(data: bytes) -> None:
    proto = onnx.ModelProto()
    proto.ParseFromString(data)
    if not proto.graph.node and not proto.graph.output:
        raise ValueError("empty")


def run_case(model_bytes: bytes, folder: Path, timeout: float) -> Outcome:
    """Compile and analyze one (mutated) model; classify the worst of the two runs."""
    src = folder / "model.onnx"
    src.write_bytes(model_bytes)
    commands = (
        (["compile", str(src), "-o", str(folder / "out.onnx")], "out.onnx", _parse_onnx),
        (["analyze", str(src), "--json", str(folder / "a.json")], "a.json", json.loads),
    )
    worst = Outcome("ok", "")
    for argv, out_name, reader in commands:
        code, err, status = run_cli_forked(argv, timeout)
        out = folder / out_name
        label = f"{argv[0]}: {err.strip().splitlines()[-1] if err.strip() else status}"
        if status != "done":
            outcome = Outcome(status, label)
        elif "Traceback" in err or code == 99:
            outcome = Outcome("traceback", f"{argv[0]}: {err.strip()[-600:]}")
        elif code not in (0, 1, 2):
            outcome = Outcome("bad_exit", f"{argv[0]}: exit {code}: {err.strip()[-300:]}")
        elif code == 2 and len(err.strip().splitlines()) != 1:
            outcome = Outcome("traceback", f"{argv[0]}: not one line: {err.strip()[-600:]}")
        elif (code == 0 and not _check_output(out, reader)) or (code != 0 and out.exists()) \
                or _leftovers(folder, out_name):
            outcome = Outcome("half_written", f"{label} (files: {_leftovers(folder, '')})")
        else:
            outcome = Outcome({0: "ok", 1: "exit1", 2: "rejected"}[code], label)
        for p in folder.iterdir():
            if p.name != "model.onnx":
                p.unlink()
        if BAD.count(outcome.kind) or (worst.kind == "ok" and outcome.kind != "ok"):
            worst = outcome
        if outcome.kind in BAD:
            break
    return worst


def fuzz(cases: int, seed: int = 0, timeout: float = 20.0, seeds: dict[str, bytes] | None = None,
         only: int | None = None, on_case: Callable[[int, str, str, Outcome], None] | None = None
         ) -> Counter:
    """Run ``cases`` cases (case i uses Random(seed * 1_000_003 + i)); counts by outcome."""
    import opfuse.api  # noqa: F401  (imported once here, not in every forked child)

    seeds = seeds or seed_protos()
    names = sorted(seeds)
    counts: Counter = Counter()
    with tempfile.TemporaryDirectory(prefix="opfuse-fuzz-") as tmp:
        folder = Path(tmp)
        for i in range(cases) if only is None else [only]:
            rng = random.Random(seed * 1_000_003 + i)
            name = names[i % len(names)]
            data, what = mutate(seeds[name], rng)
            outcome = run_case(data, folder, timeout)
            counts[outcome.kind] += 1
            if on_case is not None:
                on_case(i, name, what, outcome)
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=20.0, help="seconds per command")
    parser.add_argument("--all", action="store_true", help="also the large built-ins")
    parser.add_argument("--only", type=int, help="run this one case, verbosely")
    parser.add_argument("--show", type=int, default=5, help="examples per bad outcome")
    args = parser.parse_args()
    seeds = seed_protos(SMALL_SEEDS + (LARGE_SEEDS if args.all else ()))
    shown: Counter = Counter()
    tally: Counter = Counter()
    t0 = time.perf_counter()

    def report(i: int, name: str, what: str, outcome: Outcome) -> None:
        tally[outcome.kind] += 1
        if (i + 1) % 500 == 0:
            print(f"... {i + 1} cases, {time.perf_counter() - t0:.0f} s: {dict(tally)}", flush=True)
        if args.only is not None or (outcome.kind in BAD and shown[outcome.kind] < args.show):
            shown[outcome.kind] += 1
            print(f"case {i} [{name}] {what}: {outcome.kind}: {outcome.detail}", flush=True)

    counts = fuzz(args.cases, args.seed, args.timeout, seeds, args.only, report)
    elapsed = time.perf_counter() - t0
    total = sum(counts.values())
    print(f"{total} cases in {elapsed:.0f} s (seed {args.seed}, {len(seeds)} seed models)")
    for kind in GOOD + BAD:
        print(f"  {kind:13s} {counts[kind]}")
    sys.exit(1 if any(counts[k] for k in BAD) else 0)


if __name__ == "__main__":
    main()
