"""The memory estimator: weights + KV cache + compute buffers + overhead, with
llama.cpp's own sizing rules (``llama.py``) and the model shape read from a GGUF."""
