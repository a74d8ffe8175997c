"""Runtime adapters (llama.cpp, OpenVINO, ONNX Runtime) behind one interface, and their catalog."""
