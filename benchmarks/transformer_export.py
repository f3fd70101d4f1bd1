"""Export tiny random-weight models from Hugging Face ``transformers`` configs to ONNX (opset 17).

The models are the issue's corpus of today's edge models: vision and audio transformers, small
language models and modern CNNs, with random weights (the numerics are what opfuse is checked on,
not the accuracy). Needs torch and transformers (not opfuse dependencies):

    python benchmarks/transformer_export.py OUT_DIR [NAME ...]

Every model's inputs are static; the file names are ``NAME.onnx`` (``mobilevit_dynamo.onnx`` is the
same MobileViT through ``torch.onnx.export(dynamo=True)``).
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

OPSET = 17
# torch exports MobileViTV2's fold (aten::col2im) only from opset 18 (Col2Im is an opset-18 op)
OPSET_OF = {"mobilevit_v2": 18}


def _image(config_cls_name: str, model_cls_name: str, shape: tuple[int, ...], **config):
    def build():
        import torch
        import transformers

        cfg = getattr(transformers, config_cls_name)(**config)
        model = getattr(transformers, model_cls_name)(cfg)
        return model, (torch.randn(*shape),), ["pixel_values"]

    return build


def _text(config_cls_name: str, model_cls_name: str, seq: int, vocab_key: str, mask: bool,
          token_types: bool, **config):
    def build():
        import torch
        import transformers

        cfg = getattr(transformers, config_cls_name)(**config)
        model = getattr(transformers, model_cls_name)(cfg)
        vocab = getattr(cfg, vocab_key)
        args = [torch.randint(0, vocab, (1, seq))]
        names = ["input_ids"]
        if mask:
            args.append(torch.ones(1, seq, dtype=torch.int64))
            names.append("attention_mask")
        if token_types:
            args.append(torch.zeros(1, seq, dtype=torch.int64))
            names.append("token_type_ids")
        return model, tuple(args), names

    return build


def _whisper_encoder():
    import torch
    import transformers

    cfg = transformers.WhisperConfig(d_model=384, encoder_layers=4, encoder_attention_heads=6,
                                     decoder_layers=1, decoder_attention_heads=6,
                                     encoder_ffn_dim=1536, decoder_ffn_dim=1536, num_mel_bins=80,
                                     max_source_positions=1500)
    model = transformers.WhisperModel(cfg).get_encoder()
    return model, (torch.randn(1, 80, 3000),), ["input_features"]


MODELS: dict[str, Callable] = {
    # DeiT-tiny size: 192 wide, 12 layers, 3 heads, 224x224 in 16x16 patches
    "vit_tiny": _image("ViTConfig", "ViTForImageClassification", (1, 3, 224, 224), hidden_size=192,
                       num_hidden_layers=12, num_attention_heads=3, intermediate_size=768,
                       image_size=224, patch_size=16, num_labels=1000),
    # keyword-spotting transformer (KWT-1 shape): 40 MFCC x 98 frames, one patch per frame
    "kws_transformer": _image("ViTConfig", "ViTForImageClassification", (1, 1, 40, 98),
                              hidden_size=64, num_hidden_layers=12, num_attention_heads=1,
                              intermediate_size=256, image_size=(40, 98), patch_size=(40, 1),
                              num_channels=1, num_labels=12),
    "mobilevit": _image("MobileViTConfig", "MobileViTForImageClassification", (1, 3, 256, 256)),
    "mobilevit_v2": _image("MobileViTV2Config", "MobileViTV2ForImageClassification",
                           (1, 3, 256, 256)),
    "levit_128s": _image("LevitConfig", "LevitForImageClassification", (1, 3, 224, 224)),
    "convnext_atto": _image("ConvNextConfig", "ConvNextForImageClassification", (1, 3, 224, 224),
                            hidden_sizes=[40, 80, 160, 320], depths=[2, 2, 6, 2]),
    "efficientnet_b0": _image("EfficientNetConfig", "EfficientNetForImageClassification",
                              (1, 3, 224, 224), width_coefficient=1.0, depth_coefficient=1.0,
                              image_size=224, dropout_rate=0.2, hidden_dim=1280),
    "regnet_x_200mf": _image("RegNetConfig", "RegNetForImageClassification", (1, 3, 224, 224),
                             layer_type="x", hidden_sizes=[24, 56, 152, 368], depths=[1, 1, 4, 7],
                             groups_width=8),
    "mobilenet_v2": _image("MobileNetV2Config", "MobileNetV2ForImageClassification",
                           (1, 3, 224, 224)),
    "resnet18": _image("ResNetConfig", "ResNetForImageClassification", (1, 3, 224, 224),
                       layer_type="basic", depths=[2, 2, 2, 2], hidden_sizes=[64, 128, 256, 512]),
    "bert_tiny": _text("BertConfig", "BertModel", 128, "vocab_size", True, True, hidden_size=128,
                       num_hidden_layers=2, num_attention_heads=2, intermediate_size=512,
                       attn_implementation="eager"),
    "distilbert_tiny": _text("DistilBertConfig", "DistilBertModel", 128, "vocab_size", True, False,
                             dim=128, n_layers=2, n_heads=2, hidden_dim=512,
                             attn_implementation="eager"),
    "whisper_tiny_encoder": _whisper_encoder,
    "llama_tiny": _text("LlamaConfig", "LlamaModel", 32, "vocab_size", True, False,
                        hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                        num_key_value_heads=4, intermediate_size=688, vocab_size=1000,
                        use_cache=False, attn_implementation="eager"),
}


class _FirstOutput:
    """Wraps a model so the export has one output: the logits or the last hidden state."""

    def __new__(cls, model):
        import torch

        class Wrapped(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.model = model

            def forward(self, *args):
                out = self.model(*args)
                return out[0] if isinstance(out, tuple) else next(iter(out.values()))

        return Wrapped()


def export(name: str, out_dir: Path, dynamo: bool = False) -> Path:
    import torch

    torch.manual_seed(0)
    model, args, names = MODELS[name]()
    model.eval()
    wrapped = _FirstOutput(model)
    path = out_dir / f"{name}{'_dynamo' if dynamo else ''}.onnx"
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(wrapped, args, str(path), input_names=names, output_names=["output"],
                          opset_version=OPSET_OF.get(name, OPSET), dynamo=dynamo, do_constant_folding=True,
                          **({"external_data": False} if dynamo else {}))
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("names", nargs="*", help=f"default: all of {', '.join(MODELS)}")
    parser.add_argument("--dynamo", action="store_true",
                        help="also export MobileViT with torch.onnx.export(dynamo=True)")
    a = parser.parse_intermixed_args(argv)
    a.out_dir.mkdir(parents=True, exist_ok=True)
    failed = 0
    for name in a.names or list(MODELS):
        for dynamo in ([False, True] if (a.dynamo and name == "mobilevit") else [False]):
            try:
                path = export(name, a.out_dir, dynamo)
                print(f"{path.name}: {path.stat().st_size:,} bytes")
            except Exception as exc:  # noqa: BLE001 - report every model, then fail
                failed += 1
                print(f"{name}{' (dynamo)' if dynamo else ''}: failed: "
                      f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
