"""Small int8 TFLite UNIDIRECTIONAL_SEQUENCE_LSTM models written with ``tflite_builder`` (as the
TFLite converter writes a Keras LSTM quantized to int8: int8 input, output and hidden state,
per-tensor int8 weights, int32 gate biases at input scale x weight scale, an int16 cell state
whose scale is a power of two; no peepholes, projection or layer norm, which TFLite Micro's
kernel does not take)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tests.helpers.tflite_builder import TfliteBuilder

TANH = 4  # ActivationFunctionType.TANH: the cell gate's activation


def lstm_int8_model(path: Path, steps: int = 6, batch: int = 1, size: int = 5, hidden: int = 8,
                    time_major: bool = False, cell_power: int = -11, seed: int = 0,
                    options: dict | None = None, float_model: bool = False) -> Path:
    """One LSTM with seeded weights (scales around those the converter gives a unit-range
    input), its input and output graph tensors; ``options``: option fields to override.
    ``float_model``: the same LSTM in float32 (the dequantized weights), as a float model."""
    rng = np.random.default_rng(seed)
    b = TfliteBuilder()

    def act(name: str, shape, dtype, scale: float, zero_point: int = 0, **kw) -> int:
        if float_model:
            return b.tensor(name, shape, np.float32, **kw)
        return b.tensor(name, shape, dtype, scale=scale, zero_point=zero_point, **kw)

    def const(name: str, data: np.ndarray, scale: float) -> int:
        if float_model:
            return b.const(name, (data * scale).astype(np.float32))
        return b.const(name, data, scale=scale)

    x_scale, x_zp = 0.03, -5
    h_scale, h_zp = 1.0 / 128, 3
    shape = (steps, batch, size) if time_major else (batch, steps, size)
    x = act("x", shape, np.int8, x_scale, x_zp)
    b.inputs.append(x)
    gates = ("input", "forget", "cell", "output")
    w_in, w_rec, biases = [], [], []
    for g in gates:
        ws = float(rng.uniform(0.002, 0.006))
        w_in.append(const(f"{g}_w", rng.integers(-127, 128, (hidden, size)).astype(np.int8), ws))
        biases.append(const(f"{g}_b", rng.integers(-3000, 3000, hidden).astype(np.int32),
                            x_scale * ws))
    for g in gates:
        rs = float(rng.uniform(0.002, 0.006))
        w_rec.append(const(f"{g}_r", rng.integers(-127, 128, (hidden, hidden)).astype(np.int8),
                           rs))
    h = act("h", (batch, hidden), np.int8, h_scale, h_zp, variable=True)
    c = act("c", (batch, hidden), np.int16, 2.0 ** cell_power, variable=True)
    y_shape = (steps, batch, hidden) if time_major else (batch, steps, hidden)
    y = act("y", y_shape, np.int8, h_scale, h_zp)
    inputs = [x, *w_in, *w_rec, -1, -1, -1, *biases, -1, -1, h, c, -1, -1, -1, -1]
    fields = {"FusedActivationFunction": TANH, "CellClip": 0.0, "ProjClip": 0.0,
              "TimeMajor": time_major, "AsymmetricQuantizeInputs": False, **(options or {})}
    b.op("UNIDIRECTIONAL_SEQUENCE_LSTM", inputs, [y], "UnidirectionalSequenceLSTMOptions",
         **fields)
    b.output(y)
    path.write_bytes(b.build())
    return path
