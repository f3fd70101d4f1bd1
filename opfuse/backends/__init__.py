"""Backends: ``onnx`` (portable ONNX, optional onnxruntime flavor); ``c`` comes later."""
