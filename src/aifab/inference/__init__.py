"""Serving models: handlers (classifier, LM, embeddings), loading, dynamic batching, ONNX.

Kept light on purpose: import the submodules you need (they pull torch/transformers lazily).
"""
