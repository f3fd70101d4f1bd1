"""A small pre-LayerNorm transformer encoder, written the way PyTorch exports one at opset 17."""

from __future__ import annotations

import math

import numpy as np
import onnx

from opfuse.models.graph import GraphBuilder

SEQ, DIM, HEADS, LAYERS, MLP = 64, 64, 4, 2, 256


def _attention(g: GraphBuilder, x: str, name: str) -> str:
    hd = DIM // HEADS
    q, k, v = (g.reshape(g.linear(x, DIM, f"{name}.{p}"), (1, SEQ, HEADS, hd), f"{name}.{p}.split")
               for p in "qkv")
    q = g.transpose(q, (0, 2, 1, 3), f"{name}.q.heads")  # (1, heads, seq, hd)
    k = g.transpose(k, (0, 2, 3, 1), f"{name}.k.heads")  # (1, heads, hd, seq)
    v = g.transpose(v, (0, 2, 1, 3), f"{name}.v.heads")
    scores = g.matmul(q, k, f"{name}.scores")
    scale = g.shared("attn.scale", np.array(1.0 / math.sqrt(hd)))
    probs = g.softmax(g.mul(scores, scale, f"{name}.scale"), f"{name}.softmax")
    ctx = g.transpose(g.matmul(probs, v, f"{name}.context"), (0, 2, 1, 3), f"{name}.merge")
    ctx = g.reshape(ctx, (1, SEQ, DIM), f"{name}.concat")
    return g.linear(ctx, DIM, f"{name}.out")


def tiny_transformer() -> onnx.ModelProto:
    """Transformer encoder on 1x64x64 embeddings (seq 64, dim 64): learned positional embedding Add,
    2 pre-LN layers (LayerNormalization; 4-head attention with MatMul + Add bias, Reshape/Transpose,
    Mul by 1/sqrt(16), Softmax; MLP 64 -> 256 -> 64 with GELU written out with Erf, as opset 17 has
    no Gelu op; residual Adds), final LayerNormalization."""
    g = GraphBuilder("tiny_transformer", seed=6)
    x = g.input("input", (1, SEQ, DIM))
    x = g.add(x, g.init("pos_embedding", g.normal((1, SEQ, DIM), 0.5)), "embed.add_pos")
    for i in range(LAYERS):
        name = f"layers.{i}"
        h = _attention(g, g.layernorm(x, f"{name}.ln1"), f"{name}.attn")
        x = g.add(x, h, f"{name}.attn.residual")
        h = g.linear(g.layernorm(x, f"{name}.ln2"), MLP, f"{name}.mlp.fc1")
        h = g.linear(g.gelu_erf(h, f"{name}.mlp.gelu"), DIM, f"{name}.mlp.fc2")
        x = g.add(x, h, f"{name}.mlp.residual")
    x = g.layernorm(x, "final_ln")
    g.output(x)
    return g.model(tiny_transformer.__doc__ or "")
