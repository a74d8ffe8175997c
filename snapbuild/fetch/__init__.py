"""An engine's artifact files: found in the cache or a local package,
downloaded and checked, and recorded on first use."""
