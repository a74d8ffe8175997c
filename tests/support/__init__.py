"""Test helpers shared between test modules, one module per area."""
