"""snapbuild: turn a model manifest into an inference snap that picks its engine per machine."""

__version__ = "0.1.0"
