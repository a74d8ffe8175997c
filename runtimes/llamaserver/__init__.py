"""The llama.cpp engine: llama.cpp's own ``llama-server`` as a supervised
child, requests relayed to it, tool calls emulated where its template has none."""
