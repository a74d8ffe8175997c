"""The builder's steps: from a manifest to a snapcraft project for one inference snap.

:mod:`.plan` decides what goes into the snap (engines, components, shards), :mod:`.snapcraft_yaml`
turns a plan into snapcraft.yaml data, :mod:`.snapyaml` derives the ``meta/snap.yaml`` snapcraft
would write, :mod:`.naming` checks the snap naming rules the JSON Schema does not, and
:mod:`.render` writes the files (snapcraft.yaml and the data files dumped by code, the hooks and
texts through a strict jinja2 environment).

This package has no public face of its own: :mod:`snapbuild.project.builder` is the one entry point
(``build_project``, ``make``, ``snap_yaml``...), so callers never choose between two. (The
repository's .gitignore matches ``build/``: new files here need ``git add -f``.)
"""
