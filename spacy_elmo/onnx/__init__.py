"""Serving without PyTorch: the biLM exported as an ONNX graph (`export.py`, needs torch and the `[onnx]`
extra)."""
