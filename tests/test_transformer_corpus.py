"""The tiniest configs of the issue-21 corpus, exported with torch as benchmarks/transformer_export.py
exports the full-size ones, go through analyze and compile --check.

What must hold on a static export: no tensor of unknown size, no Shape op left (the exporter's
shape subgraphs fold at import), no op of the export opaque, the emitted ONNX equal to the export in
onnxruntime on inputs the model can take (token ids within the vocabulary, masks of ones); and the
generated C too, where the C backend has the kernels. Skips with a message where torch or
transformers do not import (they are not opfuse dependencies).
"""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest

torch = pytest.importorskip("torch", reason="the corpus test exports with torch, not installed")
pytest.importorskip("transformers", reason="the corpus test builds transformers configs, not "
                    "installed")

from benchmarks import transformer_export as corpus  # noqa: E402 (needs torch to be useful)

TINY = {
    # BERT 32 wide, 2 layers, 2 heads, vocab 100, 16 tokens: ids, mask, token types
    "bert_32": corpus._text("BertConfig", "BertModel", 16, "vocab_size", True, True,
                            hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                            intermediate_size=64, vocab_size=100, max_position_embeddings=32,
                            attn_implementation="eager"),
    # ViT 32 wide on 32x32 in 8x8 patches: class token, position embeddings, erf GELU
    "vit_32": corpus._image("ViTConfig", "ViTForImageClassification", (1, 3, 32, 32),
                            hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                            intermediate_size=64, image_size=32, patch_size=8, num_labels=10),
    # EfficientNet at a quarter width on 64x64: its "same" padding is a Pad whose pads the
    # exporter computes (Shape, ConstantOfShape, Concat, Slice...), a flatten reads Shape
    "efficientnet_tiny": corpus._image("EfficientNetConfig", "EfficientNetForImageClassification",
                                       (1, 3, 64, 64), width_coefficient=0.25,
                                       depth_coefficient=0.5, image_size=64, hidden_dim=320,
                                       num_labels=10),
    # Llama 32 wide, 2 layers, vocab 64, 8 tokens: rotary embeddings, RMSNorm, causal mask
    "llama_32": corpus._text("LlamaConfig", "LlamaModel", 8, "vocab_size", True, False,
                             hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                             num_key_value_heads=2, intermediate_size=64, vocab_size=64,
                             max_position_embeddings=32, use_cache=False,
                             attn_implementation="eager"),
}


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("corpus")
    paths = {}
    with pytest.MonkeyPatch.context() as patch:
        for name, build in TINY.items():
            patch.setitem(corpus.MODELS, name, build)
            paths[name] = corpus.export(name, folder)
    return paths


@pytest.mark.parametrize("name", sorted(TINY))
def test_analyze_knows_every_size_and_op(name: str, exported, run_cli, tmp_path) -> None:
    report = tmp_path / "a.json"
    code, _, err = run_cli("analyze", str(exported[name]), "--json", str(report))
    assert code == 0, err
    data = json.loads(report.read_text())
    assert data["unknown_bytes_tensors"] == []
    assert data["before"]["unknown_bytes_tensors"] == data["after"]["unknown_bytes_tensors"] == []
    opaque = [d for d in data["decisions"] if d["reason"] == "opaque_op"]
    assert opaque == [], opaque[:3]


@pytest.mark.parametrize("name", sorted(TINY))
def test_compile_check_matches_onnxruntime(name: str, exported, run_cli, tmp_path) -> None:
    out = tmp_path / "out.onnx"
    code, stdout, err = run_cli("compile", str(exported[name]), "-o", str(out), "--check")
    assert code == 0, err
    assert "result: match" in stdout
    assert "Shape" not in {node.op_type for node in onnx.load(out).graph.node}


@pytest.mark.parametrize("name", sorted(TINY))
def test_compile_c_check_matches_onnxruntime(name: str, exported, run_cli, tmp_path) -> None:
    code, stdout, err = run_cli("compile", str(exported[name]), "--emit", "c", "-o",
                                str(tmp_path / "c"), "--check")
    if code == 3 and "no C kernel for op" in err:
        pytest.skip(f"the C backend lacks a kernel this export needs: {err.strip()[:160]}")
    assert code == 0, err
    assert "result: match" in stdout
