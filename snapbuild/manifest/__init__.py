"""Model manifests: the typed model, loading with positions, the problems
and checks a packager is told about, in-place edits."""
