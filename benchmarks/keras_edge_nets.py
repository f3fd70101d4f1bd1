"""Five small Keras edge networks and the TFLite converter's float and int8 models of them
(needs TensorFlow; benchmarks/quantize_accuracy.py imports this only when it is installed).

The networks are the MLPerf Tiny / edge classics at small sizes: the anomaly-detection
autoencoder (Dense 640-128x4-8-128x4-640 with BN + ReLU), DS-CNN (keyword spotting, 49x10x1),
MobileNet v1 (alpha 0.25, 96x96x3), MobileNet v2 (alpha 0.35, 96x96x3) and ResNet-8 (CIFAR,
32x32x3). Weights are Keras' random initialisation and every BatchNormalization gets random
statistics (gamma, beta, moving mean and variance), seeded, so folding BN changes the weights as
in a trained model. Inputs have batch 1 (static shapes).

The int8 model is the converter's full-integer post-training quantization: optimizations DEFAULT,
the representative dataset = the calibration samples one by one, TFLITE_BUILTINS_INT8, float
input and output (the converter's QUANTIZE/DEQUANTIZE at the ends), per-channel weights (its
default). A float .tflite one did not build here (a shared model) goes through the converter's
own two steps on the flatbuffer: its Calibrator and its MLIR quantizer, as TFLiteConverter does
after converting to float.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

keras = tf.keras
layers = keras.layers


def _bn_relu(x, relu6: bool = False):
    x = layers.BatchNormalization()(x)
    return layers.ReLU(6.0 if relu6 else None)(x)


def autoencoder() -> keras.Model:
    inp = keras.Input((640,), batch_size=1)
    x = inp
    for units in (128, 128, 128, 128, 8, 128, 128, 128, 128):
        x = _bn_relu(layers.Dense(units)(x))
    return keras.Model(inp, layers.Dense(640)(x), name="autoencoder")


def ds_cnn() -> keras.Model:
    inp = keras.Input((49, 10, 1), batch_size=1)
    x = _bn_relu(layers.Conv2D(64, (10, 4), strides=2, padding="same", use_bias=False)(inp))
    for _ in range(4):
        x = _bn_relu(layers.DepthwiseConv2D(3, padding="same", use_bias=False)(x))
        x = _bn_relu(layers.Conv2D(64, 1, use_bias=False)(x))
    x = layers.GlobalAveragePooling2D()(x)
    return keras.Model(inp, layers.Dense(12, activation="softmax")(x), name="ds_cnn")


def mobilenet_v1() -> keras.Model:
    return keras.applications.MobileNet(input_shape=(96, 96, 3), alpha=0.25, weights=None,
                                        classes=2, input_tensor=keras.Input((96, 96, 3),
                                                                            batch_size=1))


def mobilenet_v2() -> keras.Model:
    return keras.applications.MobileNetV2(input_shape=(96, 96, 3), alpha=0.35, weights=None,
                                          classes=10, input_tensor=keras.Input((96, 96, 3),
                                                                               batch_size=1))


def resnet8() -> keras.Model:
    inp = keras.Input((32, 32, 3), batch_size=1)
    x = _bn_relu(layers.Conv2D(16, 3, padding="same")(inp))
    for filters, stride in ((16, 1), (32, 2), (64, 2)):
        y = _bn_relu(layers.Conv2D(filters, 3, strides=stride, padding="same")(x))
        y = layers.BatchNormalization()(layers.Conv2D(filters, 3, padding="same")(y))
        if stride != 1:
            x = layers.Conv2D(filters, 1, strides=stride)(x)
        x = layers.ReLU()(layers.Add()([x, y]))
    x = layers.GlobalAveragePooling2D()(x)
    return keras.Model(inp, layers.Dense(10, activation="softmax")(x), name="resnet8")


NETWORKS = {"autoencoder": autoencoder, "ds_cnn_keras": ds_cnn, "mobilenet_v1_keras": mobilenet_v1,
            "mobilenet_v2_keras": mobilenet_v2, "resnet8_keras": resnet8}


def randomize_bn(model: keras.Model, seed: int) -> None:
    """Random BN statistics, as a trained model has them (seeded)."""
    rng = np.random.default_rng(seed)
    for layer in model.layers:
        if isinstance(layer, layers.BatchNormalization):
            n = layer.gamma.shape[0]
            layer.set_weights([rng.uniform(0.5, 1.5, n).astype(np.float32),   # gamma
                               rng.normal(0.0, 0.2, n).astype(np.float32),    # beta
                               rng.normal(0.0, 0.2, n).astype(np.float32),    # moving mean
                               rng.uniform(0.5, 1.5, n).astype(np.float32)])  # moving variance


def build(name: str, seed: int = 0) -> keras.Model:
    keras.utils.set_random_seed(seed)
    model = NETWORKS[name]()
    randomize_bn(model, seed + 1)
    return model


def _representative(cal: np.ndarray):
    def gen():
        for sample in cal:
            yield [sample[None].astype(np.float32)]
    return gen


def convert(model: keras.Model, cal: np.ndarray) -> tuple[bytes, bytes]:
    """(float .tflite, the converter's full-int8 .tflite calibrated on ``cal``: N x input shape)."""
    float_tfl = tf.lite.TFLiteConverter.from_keras_model(model).convert()
    conv = tf.lite.TFLiteConverter.from_keras_model(model)
    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    conv.representative_dataset = _representative(cal)
    conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    return float_tfl, conv.convert()


def quantize_tflite(float_tfl: bytes, cal: np.ndarray) -> bytes:
    """The converter's post-training int8 of a float flatbuffer: the steps TFLiteConverter runs
    after its float conversion (its Calibrator, then its MLIR quantizer, per-channel)."""
    from tensorflow.lite.python import convert as tf_convert
    from tensorflow.lite.python.optimize import calibrator

    model = calibrator.add_intermediate_tensors(float_tfl)
    calibrated = calibrator.Calibrator(model).calibrate(_representative(cal))
    return tf_convert.mlir_quantize(calibrated, False, input_data_type=tf.float32,
                                    output_data_type=tf.float32)


def run_tflite(flatbuffer: bytes, inputs: np.ndarray) -> list[np.ndarray]:
    """The first output of ``flatbuffer`` in LiteRT for each of ``inputs`` (N x input shape)."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    # the reference kernels (TFLite Micro's arithmetic), not XNNPACK's
    interp = Interpreter(model_content=flatbuffer, num_threads=1,
                         experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
    interp.allocate_tensors()
    inp = interp.get_input_details()[0]
    out = interp.get_output_details()[0]
    results = []
    for x in inputs:
        interp.set_tensor(inp["index"], x.reshape(inp["shape"]).astype(np.float32))
        interp.invoke()
        results.append(interp.get_tensor(out["index"]).copy())
    return results
