"""Build small .tflite files in tests: the flatbuffers Builder with the `tflite` package's generated
builder functions. For single-op checks of the TFLite frontend and of int8 C kernels against
TFLite Micro.

    b = TfliteBuilder()
    x = b.input("x", (1, 8, 8, 3), np.int8, scale=0.05, zero_point=-3)
    w = b.const("w", rng.integers(-127, 128, (4, 3, 3, 3)).astype(np.int8),
                scale=np.full(4, 0.01), zero_point=0, axis=0)          # per channel
    bias = b.const("b", np.zeros(4, np.int32), scale=0.05 * np.full(4, 0.01), axis=0)
    y = b.tensor("y", (1, 8, 8, 4), np.int8, scale=0.1, zero_point=5)
    b.op("CONV_2D", [x, w, bias], [y], "Conv2DOptions",
         Padding=SAME, StrideH=1, StrideW=1, DilationHFactor=1, DilationWFactor=1,
         FusedActivationFunction=RELU)
    b.output(y)
    path.write_bytes(b.build())

Options are given by table name and field names as in the schema (``Conv2DOptions``,
``StrideH``...); a field left out takes the schema default (0, except where noted there).
"""

from __future__ import annotations

from collections.abc import Sequence

import flatbuffers
import numpy as np
import tflite
from tflite.BuiltinOperator import BuiltinOperator
from tflite.BuiltinOptions import BuiltinOptions
from tflite.TensorType import TensorType

SAME, VALID = 0, 1
NONE, RELU, RELU_N1_TO_1, RELU6 = 0, 1, 2, 3

_TYPES = {
    np.dtype(np.float32): TensorType.FLOAT32, np.dtype(np.float16): TensorType.FLOAT16,
    np.dtype(np.int32): TensorType.INT32, np.dtype(np.int64): TensorType.INT64,
    np.dtype(np.int16): TensorType.INT16, np.dtype(np.int8): TensorType.INT8,
    np.dtype(np.uint8): TensorType.UINT8, np.dtype(np.bool_): TensorType.BOOL,
}


class TfliteBuilder:
    def __init__(self) -> None:
        self._tensors: list[dict] = []
        self._buffers: list[bytes] = [b""]  # buffer 0: the empty sentinel
        self._codes: list[tuple[int, str]] = []
        self._ops: list[dict] = []
        self.inputs: list[int] = []
        self.outputs: list[int] = []

    # --- tensors ---------------------------------------------------------------------------
    def tensor(self, name: str, shape: Sequence[int], dtype, *, data: np.ndarray | None = None,
               scale=None, zero_point=0, axis: int = 0, sparsity: dict | None = None,
               shares: int | None = None, variable: bool = False) -> int:
        """An activation (``data`` None) or constant; ``scale`` given: quantized (per channel
        along ``axis`` when several scales). ``sparsity``: ``data`` holds only the stored values
        of a sparse constant, described by ``traversal_order``, ``block_map`` and ``dim_metadata``
        (a list of ``("dense", size)`` or ``("csr", segments, indices)``). ``shares``: a constant
        reading tensor ``shares``'s buffer (the converter's deduplicated buffers). ``variable``:
        a state the interpreter keeps between invocations (an LSTM's hidden and cell state)."""
        buffer = 0 if shares is None else self._tensors[shares]["buffer"]
        if data is not None:
            buffer = len(self._buffers)
            self._buffers.append(np.ascontiguousarray(data, dtype=dtype).tobytes())
        quant = None
        if scale is not None:
            s = np.atleast_1d(np.asarray(scale, np.float32))
            z = np.atleast_1d(np.asarray(zero_point, np.int64))
            if z.size == 1 and s.size > 1:
                z = np.full(s.shape, int(z[0]), np.int64)
            quant = (s, z, axis)
        self._tensors.append({"name": name, "shape": [int(d) for d in shape],
                              "type": _TYPES[np.dtype(dtype)], "buffer": buffer, "quant": quant,
                              "sparsity": sparsity, "variable": variable})
        return len(self._tensors) - 1

    def const(self, name: str, data: np.ndarray, **quant) -> int:
        data = np.asarray(data)
        return self.tensor(name, data.shape, data.dtype, data=data, **quant)

    def input(self, name: str, shape: Sequence[int], dtype, **quant) -> int:
        index = self.tensor(name, shape, dtype, **quant)
        self.inputs.append(index)
        return index

    def output(self, index: int) -> None:
        self.outputs.append(index)

    # --- operators -------------------------------------------------------------------------
    def op(self, opcode: str, inputs: Sequence[int], outputs: Sequence[int],
           options: str | None = None, *, custom_code: str = "", custom_options: bytes = b"",
           **fields) -> int:
        """Append operator ``opcode`` (a BuiltinOperator name, or CUSTOM with ``custom_code``)."""
        code = (getattr(BuiltinOperator, opcode), custom_code)
        if code not in self._codes:
            self._codes.append(code)
        self._ops.append({"code": self._codes.index(code), "inputs": list(inputs),
                          "outputs": list(outputs), "options": options, "fields": fields,
                          "custom": custom_options})
        return len(self._ops) - 1

    # --- serialization ---------------------------------------------------------------------
    def build(self) -> bytes:
        b = flatbuffers.Builder(1024)
        buffers = [self._buffer(b, data) for data in self._buffers]
        tensors = [self._tensor(b, t) for t in self._tensors]
        ops = [self._op(b, op) for op in self._ops]
        codes = [self._code(b, builtin, custom) for builtin, custom in self._codes]
        name = b.CreateString("main")
        t_vec = self._offsets(b, tflite.SubGraphStartTensorsVector, tensors)
        o_vec = self._offsets(b, tflite.SubGraphStartOperatorsVector, ops)
        i_vec = b.CreateNumpyVector(np.asarray(self.inputs, np.int32))
        out_vec = b.CreateNumpyVector(np.asarray(self.outputs, np.int32))
        tflite.SubGraphStart(b)
        tflite.SubGraphAddTensors(b, t_vec)
        tflite.SubGraphAddInputs(b, i_vec)
        tflite.SubGraphAddOutputs(b, out_vec)
        tflite.SubGraphAddOperators(b, o_vec)
        tflite.SubGraphAddName(b, name)
        graph = tflite.SubGraphEnd(b)
        g_vec = self._offsets(b, tflite.ModelStartSubgraphsVector, [graph])
        c_vec = self._offsets(b, tflite.ModelStartOperatorCodesVector, codes)
        b_vec = self._offsets(b, tflite.ModelStartBuffersVector, buffers)
        desc = b.CreateString("opfuse tests/helpers/tflite_builder.py")
        tflite.ModelStart(b)
        tflite.ModelAddVersion(b, 3)
        tflite.ModelAddOperatorCodes(b, c_vec)
        tflite.ModelAddSubgraphs(b, g_vec)
        tflite.ModelAddDescription(b, desc)
        tflite.ModelAddBuffers(b, b_vec)
        b.Finish(tflite.ModelEnd(b), file_identifier=b"TFL3")
        return bytes(b.Output())

    @staticmethod
    def _offsets(b, start, items: list[int]) -> int:
        start(b, len(items))
        for item in reversed(items):
            b.PrependUOffsetTRelative(item)
        return b.EndVector()

    @staticmethod
    def _buffer(b, data: bytes) -> int:
        vec = None
        if data:
            b.StartVector(1, len(data), 16)  # TFLite Micro reads constants in place: align them
            b.head -= len(data)
            b.Bytes[b.head : b.head + len(data)] = data
            vec = b.EndVector()
        tflite.BufferStart(b)
        if vec is not None:
            tflite.BufferAddData(b, vec)
        return tflite.BufferEnd(b)

    @staticmethod
    def _tensor(b, t: dict) -> int:
        quant = None
        if t["quant"] is not None:
            s, z, axis = t["quant"]
            s_vec = b.CreateNumpyVector(s.astype(np.float32))
            z_vec = b.CreateNumpyVector(z.astype(np.int64))
            tflite.QuantizationParametersStart(b)
            tflite.QuantizationParametersAddScale(b, s_vec)
            tflite.QuantizationParametersAddZeroPoint(b, z_vec)
            tflite.QuantizationParametersAddQuantizedDimension(b, axis)
            quant = tflite.QuantizationParametersEnd(b)
        sparsity = TfliteBuilder._sparsity(b, t["sparsity"]) if t["sparsity"] else None
        shape = b.CreateNumpyVector(np.asarray(t["shape"], np.int32))
        name = b.CreateString(t["name"])
        tflite.TensorStart(b)
        tflite.TensorAddShape(b, shape)
        tflite.TensorAddType(b, t["type"])
        tflite.TensorAddBuffer(b, t["buffer"])
        tflite.TensorAddName(b, name)
        if quant is not None:
            tflite.TensorAddQuantization(b, quant)
        if sparsity is not None:
            tflite.TensorAddSparsity(b, sparsity)
        if t["variable"]:
            tflite.TensorAddIsVariable(b, True)
        return tflite.TensorEnd(b)

    @staticmethod
    def _sparsity(b, spec: dict) -> int:
        from tflite.SparseIndexVector import SparseIndexVector

        def int32_vector(values) -> int:
            vec = b.CreateNumpyVector(np.asarray(values, np.int32))
            tflite.Int32VectorStart(b)
            tflite.Int32VectorAddValues(b, vec)
            return tflite.Int32VectorEnd(b)

        levels = []
        for level in spec["dim_metadata"]:
            arrays = [int32_vector(level[1]), int32_vector(level[2])] if level[0] == "csr" else []
            tflite.DimensionMetadataStart(b)
            if level[0] == "dense":
                tflite.DimensionMetadataAddFormat(b, 0)
                tflite.DimensionMetadataAddDenseSize(b, int(level[1]))
            else:
                tflite.DimensionMetadataAddFormat(b, 1)
                tflite.DimensionMetadataAddArraySegmentsType(b, SparseIndexVector.Int32Vector)
                tflite.DimensionMetadataAddArraySegments(b, arrays[0])
                tflite.DimensionMetadataAddArrayIndicesType(b, SparseIndexVector.Int32Vector)
                tflite.DimensionMetadataAddArrayIndices(b, arrays[1])
            levels.append(tflite.DimensionMetadataEnd(b))
        order = b.CreateNumpyVector(np.asarray(spec["traversal_order"], np.int32))
        block = b.CreateNumpyVector(np.asarray(spec.get("block_map", []), np.int32))
        metadata = TfliteBuilder._offsets(b, tflite.SparsityParametersStartDimMetadataVector,
                                          levels)
        tflite.SparsityParametersStart(b)
        tflite.SparsityParametersAddTraversalOrder(b, order)
        tflite.SparsityParametersAddBlockMap(b, block)
        tflite.SparsityParametersAddDimMetadata(b, metadata)
        return tflite.SparsityParametersEnd(b)

    @staticmethod
    def _op(b, op: dict) -> int:
        options = None
        if op["options"]:
            table = op["options"]
            vectors = {k: b.CreateNumpyVector(np.asarray(v, np.int32))
                       for k, v in op["fields"].items() if isinstance(v, list | tuple)}
            getattr(tflite, f"{table}Start")(b)
            for key, value in op["fields"].items():
                getattr(tflite, f"{table}Add{key}")(b, vectors.get(key, value))
            options = getattr(tflite, f"{table}End")(b)
        custom = b.CreateNumpyVector(np.frombuffer(op["custom"], np.uint8)) if op["custom"] else None
        ins = b.CreateNumpyVector(np.asarray(op["inputs"], np.int32))
        outs = b.CreateNumpyVector(np.asarray(op["outputs"], np.int32))
        tflite.OperatorStart(b)
        tflite.OperatorAddOpcodeIndex(b, op["code"])
        tflite.OperatorAddInputs(b, ins)
        tflite.OperatorAddOutputs(b, outs)
        if options is not None:
            tflite.OperatorAddBuiltinOptionsType(b, getattr(BuiltinOptions, op["options"]))
            tflite.OperatorAddBuiltinOptions(b, options)
        if custom is not None:
            tflite.OperatorAddCustomOptions(b, custom)
        return tflite.OperatorEnd(b)

    @staticmethod
    def _code(b, builtin: int, custom: str) -> int:
        name = b.CreateString(custom) if custom else None
        tflite.OperatorCodeStart(b)
        tflite.OperatorCodeAddDeprecatedBuiltinCode(b, min(builtin, 127))
        tflite.OperatorCodeAddBuiltinCode(b, builtin)
        tflite.OperatorCodeAddVersion(b, 1)
        if name is not None:
            tflite.OperatorCodeAddCustomCode(b, name)
        return tflite.OperatorCodeEnd(b)


def check_against_tflite(path, steps: float | None, seeds=range(3)):
    """Run ``path`` in its TFLite reference and its imported proto in onnxruntime on seeded inputs:
    float outputs within 1e-4 x max(|ref|, 1), quantized ones within ``steps`` quantization steps;
    then compile it through the whole pipeline. Returns the reference runner."""
    import onnxruntime as ort

    from opfuse.measure.validate.tflite_reference import TfliteReference
    from opfuse.pipeline import compile_model, read

    ref = TfliteReference(path)
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    proto = read(path)
    sess = ort.InferenceSession(proto.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    for seed in seeds:
        feeds = ref.random_inputs(seed)
        want = ref.run(feeds)
        got = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds), strict=True))
        for spec in ref.outputs:
            a, o = want[spec.name].astype(np.float64), got[spec.name].astype(np.float64)
            assert a.shape == o.shape
            if steps is None:
                assert np.abs(a - o).max() <= 1e-4 * max(np.abs(a).max(), 1.0)
            else:
                scale = spec.scale if want[spec.name].dtype.kind == "f" else 1.0
                assert np.abs(a - o).max() / scale <= steps, np.abs(a - o).max() / scale
    compile_model(path)  # and it goes through the whole pipeline
    return ref
