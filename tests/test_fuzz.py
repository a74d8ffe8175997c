"""A bounded fuzz run of the GGUF reader and the manifest loader with hypothesis: byte edits of
a sound GGUF and headers whose counts lie; line edits of a real manifest with YAML's specials
(anchors, aliases, flow brackets, tags, control characters). Every input must end in a value or
a user error (never another exception, and never past 5 s: a loop is a crash too); the run is a
bounded child (memory cap, deadline). ``SNAPBUILD_FUZZ_EXAMPLES`` (default 300 per target) and
``SNAPBUILD_FUZZ_SEED`` (default 0) size and vary it; the figures are printed (``pytest -s``)."""

from __future__ import annotations

import json
import os

import pytest
from support.bounded import MIB, ROOT, python

EXAMPLES = int(os.environ.get("SNAPBUILD_FUZZ_EXAMPLES", "300"))
SEED = os.environ.get("SNAPBUILD_FUZZ_SEED", "0")
RUN = "import sys; sys.path.insert(0, 'tests'); from support.fuzz_targets import main; main()"


@pytest.mark.parametrize("target", ["gguf", "manifest"])
def test_fuzz_finds_no_crash(target: str) -> None:
    result = python(RUN, target, str(EXAMPLES), SEED, cwd=ROOT, timeout=60 + EXAMPLES * 0.5)
    assert not result.timed_out and result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.splitlines()[-1])
    print(
        f"fuzz {target}: {report['tried']} inputs in {report['seconds']} s, "
        f"{len(report['crashes'])} crashes, {result.peak_rss / MIB:.0f} MiB peak RSS"
    )
    assert report["tried"] == EXAMPLES
    assert report["crashes"] == {}
    assert result.peak_rss < 400 * MIB
