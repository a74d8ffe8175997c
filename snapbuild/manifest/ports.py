"""Default ports: distinct and stable per snap name, so several inference snaps share a machine.

Every inference snap serves on loopback; two that default to the same port collide on a machine
that has both (the second one's install hook moves to the next free port, but then its port
depends on what was installed first). A manifest may name its ``default-port``; one that does
not gets :func:`derived_port`, a pure function of the snap's name: the same name gives the same
port on every machine and every build, and different names spread over :data:`SPAN` ports.
``snapbuild new`` writes the derived port into the manifests it scaffolds, and the shipped
manifests are checked not to collide (tests/test_ports.py).
"""

from __future__ import annotations

import zlib

BASE = 8300  # above the common development ports (8000, 8080), below 8888/9000
SPAN = 600  # 8300-8899


def derived_port(name: str) -> int:
    """``8300 + crc32(name) mod 600``: the default port of a snap named ``name`` whose manifest
    gives none (CRC-32 of the UTF-8 name, as zlib computes it)."""
    return BASE + zlib.crc32(name.encode("utf-8")) % SPAN
