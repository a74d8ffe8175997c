"""Hostile GGUF files: every one generated here, every run bounded in memory and time.

The reader (:mod:`runtimes.gguf_bounds`) must refuse a header whose counts the file cannot hold
or that exceeds a limit, and the commands that read GGUF headers (``new``, ``estimate``,
``validate`` through the manifest's local file) must answer such a file, a truncated one or one
with a number that cannot be right with a message and exit 2: never a traceback, exit 70, an
endless loop or the machine's memory. Figures are printed (``pytest -s``) for the closing note.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from support import hostile
from support.bounded import MIB, Bounded, python, snapbuild
from support.tiny_models import write_tiny_gguf

from snapbuild.estimate.gguf_shape import sliding_layers

PEAK = 300 * MIB  # what any one hostile run may cost, the command's own start included
SECONDS = 30.0

# In one bounded child: open each file with the three readers and report how each ended.
READ_ALL = """
import json, sys
from pathlib import Path
from snapcommon.errors import UsageError
from snapbuild.inspect.gguf import read_gguf_facts
from snapbuild.estimate.gguf_shape import read_gguf_shape
from runtimes.chat_templates import template_for_file
for name in sys.argv[1:]:
    for read in (read_gguf_facts, read_gguf_shape, template_for_file):
        try:
            read(Path(name))
            outcome = "ok"
        except UsageError as err:
            outcome = "refused: " + err.brief + " | " + (err.details or "")
        except Exception as exc:
            outcome = f"CRASH {type(exc).__name__}: {exc}"
        print(json.dumps([Path(name).name, read.__name__, outcome]))
"""


def _bounded(result: Bounded, what: str) -> None:
    print(f"{what}: {result.describe()}")
    assert not result.timed_out, what
    assert result.peak_rss < PEAK, f"{what}: {result.describe()}"
    assert result.seconds < SECONDS, f"{what}: {result.describe()}"


def _read_all(paths: list[Path]) -> list[tuple[str, str, str]]:
    result = python(READ_ALL, *map(str, paths))
    _bounded(result, f"reading {len(paths)} files")
    assert result.returncode == 0, result.stderr
    return [tuple(json.loads(line)) for line in result.stdout.splitlines()]  # type: ignore[misc]


def test_lying_headers_are_refused_naming_the_limit(tmp_path: Path) -> None:
    files = []
    for name, blob in hostile.lying_headers().items():
        files.append(tmp_path / f"{name}.gguf")
        files[-1].write_bytes(blob)
    outcomes = _read_all(files)
    crashes = [o for o in outcomes if "CRASH" in o[2]]
    assert not crashes
    by_file = {(f, r): o for f, r, o in outcomes}
    # the reader says why, in llama.cpp's terms or ours
    assert "limit of 1073741824" in by_file[("array-2^40.gguf", "read_gguf_facts")]
    assert "only" in by_file[("array-2^29.gguf", "read_gguf_facts")]
    assert "array of arrays" in by_file[("nested-arrays.gguf", "read_gguf_shape")]
    assert "snapbuild's limit of 65536" in by_file[("kv-count-2^60.gguf", "read_gguf_facts")]
    assert "limit of 4" in by_file[("tensor-dims-9.gguf", "read_gguf_facts")]
    assert "2^63" in by_file[("tensor-2^64-elements.gguf", "read_gguf_facts")]
    for (_, reader), outcome in by_file.items():
        if reader == "template_for_file":
            assert outcome == "ok"  # no template: the runtime decides, nothing crashes
        else:
            assert outcome.startswith("refused: "), outcome


def test_every_truncation_of_a_real_gguf_is_refused(tmp_path: Path) -> None:
    whole = write_tiny_gguf(tmp_path / "whole.gguf").read_bytes()
    cuts = hostile.truncations(whole, points=80)
    files = []
    for index, blob in enumerate(cuts):
        files.append(tmp_path / f"cut-{index:02d}.gguf")
        files[-1].write_bytes(blob)
    outcomes = _read_all(files)
    assert len(outcomes) == 3 * len(cuts) >= 240
    assert not [o for o in outcomes if "CRASH" in o[2]]
    assert all(o[2].startswith("refused: ") for o in outcomes if o[1] != "template_for_file")


@pytest.mark.parametrize("case", sorted(hostile.BAD_NUMBERS))
def test_bad_numbers_are_user_errors_naming_the_key(tmp_path: Path, case: str) -> None:
    key, number = hostile.BAD_NUMBERS[case]
    path = tmp_path / "model.gguf"
    path.write_bytes(hostile.model_gguf(**{key: number}))
    for command in (("estimate", str(path)), ("new", str(path), "-o", str(tmp_path / "m.yaml"))):
        result = snapbuild(*command)
        _bounded(result, f"{command[0]} with {case}")
        assert result.returncode == 2, result.stderr
        assert f"bad number in llama.{key}" in result.stderr
        assert "Traceback" not in result.stderr
    assert not (tmp_path / "m.yaml").exists()


def test_the_566_byte_bomb_through_every_command(tmp_path: Path) -> None:
    """Issue 26's first case: a uint8 array of 2^40 elements near the end of a small file."""
    bomb = tmp_path / "bomb.gguf"
    bomb.write_bytes(hostile.lying_headers()["array-2^40"])
    good = tmp_path / "good.gguf"
    good.write_bytes(hostile.model_gguf())
    manifest = tmp_path / "good.yaml"
    made = snapbuild("new", str(good), "-o", str(manifest), "--license", "MIT")
    assert made.returncode == 0, made.stderr
    hostile.swap_file(manifest, good, bomb)
    for command in (("estimate", str(good)), ("new", str(good)), ("validate", str(manifest))):
        result = snapbuild(*command, cwd=tmp_path)
        _bounded(result, f"{command[0]} on the bomb")
        assert result.returncode == 2, result.stderr
        assert "not a readable GGUF file" in result.stderr and "Traceback" not in result.stderr


def test_the_strings_cap_bounds_memory(tmp_path: Path) -> None:
    """At the cap on strings (2^20, well above any real vocabulary and its merges) the reader
    stays under the bound; one more string is refused before any is read."""
    at_cap = tmp_path / "at-cap.gguf"
    at_cap.write_bytes(hostile.many_strings((1 << 20) - len(hostile.TOKENS)))
    over = tmp_path / "over.gguf"
    over.write_bytes(hostile.many_strings((1 << 20) - len(hostile.TOKENS) + 1))
    ok = snapbuild("estimate", str(at_cap))
    _bounded(ok, "estimate with 2^20 strings")
    assert ok.returncode == 0, ok.stderr
    refused = snapbuild("estimate", str(over))
    _bounded(refused, "estimate with 2^20 + 1 strings")
    assert refused.returncode == 2 and "snapbuild's limit of 1048576" in refused.stderr


def test_sliding_layers_are_counted_arithmetically() -> None:
    started = time.monotonic()
    assert sliding_layers("gemma3", 1 << 62, 512, None) == (1 << 62) - (1 << 62) // 6
    assert sliding_layers("gemma3", 34, 512, None) == 29
    assert sliding_layers("llama", 10, 512, 4) == 8
    assert sliding_layers("llama", 3, 512, [True] * 100) == 3
    assert time.monotonic() - started < 0.1
