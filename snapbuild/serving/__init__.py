"""How the chosen engine runs: llama-server slots and KV-cache type
(``plan.py``), batching, threads, and the options handed to the gateway."""
