"""The catalog's native build recipes, built here exactly as their snapcraft
parts say (cached by recipe)."""
