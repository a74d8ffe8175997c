"""Our ladder selection against Canonical's flat rule, on every recorded machine.

The flat rule (Canonical's newer inference snaps): the largest size whose declared memory +
200 MiB + 2 GiB fits the best GPU's VRAM, else the total RAM. For each machine under
tests/data/machines this prints, as the markdown table docs/selection.md carries, what the rule
reads and picks, what our selector picks, and what the rule's pick does there according to our
estimator at the manifest's default context (out of memory, below the decode-speed floor, or a
larger size left unused). The logic lives in tests/support/flat_rule.py;
tests/test_ladder_vs_flat.py checks the documented table is this output.

    python benchmarks/ladder_vs_flat.py [MANIFEST]
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

from support.flat_rule import compare, markdown  # noqa: E402

from snapbuild.manifest.loader import load_manifest  # noqa: E402


def main(argv: list[str]) -> None:
    manifest = load_manifest(argv[0] if argv else "gemma3")
    sys.stdout.write(markdown(compare(manifest, ROOT / "tests" / "data" / "machines")))


if __name__ == "__main__":
    main(sys.argv[1:])
