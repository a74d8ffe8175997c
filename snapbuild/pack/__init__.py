"""``snapbuild pack``: the snap and its components built by craft-parts as snapcraft builds them,
packed as ``snap pack`` packs them. Toolkit-only (never vendored into a snap).

``pack(manifest, out, variant=...)`` returns a :class:`Packed`; ``plan(manifest, ...)`` the
build commands craft-parts would run for each part. See docs/building.md, "snapbuild pack".
"""

from snapbuild.pack.inputs import Skipped
from snapbuild.pack.packer import Packed, pack, plan

__all__ = ["Packed", "Skipped", "pack", "plan"]
