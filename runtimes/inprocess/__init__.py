"""Engines that run inside the gateway process (OpenVINO GenAI, ONNX Runtime,
the llama.cpp binding): the adapter interface, the queue, batching."""
