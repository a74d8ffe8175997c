"""Click commands of ``snapbuild``, one module per area, imported lazily by the CLI."""
