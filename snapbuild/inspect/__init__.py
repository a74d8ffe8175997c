"""``snapbuild new``: manifest facts read from model files (GGUF, ONNX,
OpenVINO IR) and the manifest written from them."""
