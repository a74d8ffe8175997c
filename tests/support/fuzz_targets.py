"""Fuzz targets for the GGUF reader and the manifest loader, run by hypothesis in a bounded
child process (tests/test_fuzz.py): whatever the bytes or the text, the readers answer with a
value or a :class:`snapcommon.errors.UsageError`; anything else is a crash, recorded with the
smallest input that showed it.

``python -c 'from support.fuzz_targets import main; main()' TARGET EXAMPLES SEED`` prints one
JSON object: the target, the inputs tried, the seconds, the crashes.
"""

from __future__ import annotations

import json
import os
import signal
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from support import hostile

INTERESTING = [
    0,
    1,
    2,
    63,
    64,
    255,
    2**16,
    2**31 - 1,
    2**31,
    2**32 - 1,
    2**32,
    2**62,
    2**63,
    2**64 - 1,
]
BASE_GGUF = hostile.model_gguf()
MANIFEST = (
    Path(__file__).resolve().parent.parent.parent / "manifests" / "smollm2.yaml"
).read_text()


class Run:
    """What one fuzz run saw."""

    def __init__(self) -> None:
        self.tried = 0
        self.crashes: dict[str, bytes | str] = {}
        self.counts: dict[str, int] = {}

    def attempt(self, call: Any, data: bytes | str) -> None:
        from snapcommon.errors import UsageError

        self.tried += 1
        # a loop without end is a crash too; re-armed every 0.5 s in case one lands where it is
        # swallowed (a gc callback)
        signal.setitimer(signal.ITIMER_REAL, HANG_S, 0.5)
        try:
            call(data)
        except UsageError:
            pass
        except BaseException as exc:  # a crash: keep the smallest input for each kind
            if isinstance(exc, KeyboardInterrupt):
                raise
            key = f"{type(exc).__name__}: {str(exc)[:120]}"
            self.counts[key] = self.counts.get(key, 0) + 1
            if key not in self.crashes or len(data) < len(self.crashes[key]):
                self.crashes[key] = data
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)


class Hang(BaseException):
    """One input ran longer than :data:`HANG_S` (not an Exception: no handler swallows it)."""


def _hang(signum: int, frame: Any) -> None:
    raise Hang(f"still running after {HANG_S} s")


HANG_S = 5.0  # ruamel scans 1,024 characters of "[[[[" quadratically: ~1 s, bounded
signal.signal(signal.SIGALRM, _hang)


# -- GGUF -----------------------------------------------------------------------------------
def _edit(blob: bytes, edits: list[tuple[int, int, int]]) -> bytes:
    """Apply (kind, position, value) edits: overwrite a little-endian integer, flip a byte,
    cut the file, or insert bytes."""
    data = bytearray(blob)
    for kind, where, value in edits:
        at = where % (len(data) + 1)
        if kind == 0:
            width = (1, 4, 8)[value % 3]
            data[at : at + width] = (
                INTERESTING[value % len(INTERESTING)] % 2 ** (8 * width)
            ).to_bytes(width, "little")
        elif kind == 1 and data:
            data[min(at, len(data) - 1)] ^= (value % 255) + 1
        elif kind == 2:
            del data[at:]
        else:
            data[at:at] = struct.pack("<Q", INTERESTING[value % len(INTERESTING)])
    return bytes(data)


def _read_gguf(blob: bytes) -> None:
    from runtimes.chat_templates import template_for_file
    from snapbuild.estimate.gguf_shape import read_gguf_shape
    from snapbuild.inspect.gguf import read_gguf_facts

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fuzz.gguf"
        path.write_bytes(blob)
        template_for_file(path)
        read_gguf_facts(path)
        read_gguf_shape(path)


EDITS = st.lists(
    st.tuples(st.integers(0, 3), st.integers(0, 1 << 16), st.integers(0, 1 << 16)), max_size=6
)
KEYS = st.sampled_from(
    [
        "llama.block_count",
        "llama.attention.head_count",
        "general.architecture",
        "llama.context_length",
        "tokenizer.ggml.tokens",
        "tokenizer.chat_template",
        "llama.attention.sliding_window",
        "llama.attention.sliding_window_pattern",
        "x.y",
    ]
)
COUNTS = st.one_of(st.sampled_from(INTERESTING), st.integers(0, 2**64 - 1))
SCALAR_KV = st.tuples(
    KEYS,
    st.sampled_from([k for k in range(13) if k != hostile.ARR]),
    st.one_of(COUNTS, st.integers(-(2**63), -1), st.floats(allow_nan=True), st.text(max_size=20)),
)
# arrays: an element type (99: none GGUF has) and a count that may lie about what follows
ARRAY_KV = st.tuples(
    KEYS,
    st.just(hostile.ARR),
    st.tuples(
        st.sampled_from([hostile.U8, hostile.U32, hostile.STR, hostile.U64, hostile.ARR, 99]),
        COUNTS,
    ),
)
KVS = st.lists(st.one_of(SCALAR_KV, ARRAY_KV), max_size=8)


def _kv(key: str, kind: int, value: Any) -> bytes:
    """A pair of ``kind`` holding ``value`` where it fits (else a zero); an array's value is
    (element type, count), with two elements written whatever the count says."""
    if kind == hostile.ARR:
        item, count = value
        items: list[Any] = ["a", "b"] if item == hostile.STR else [] if item in (9, 99) else [1, 2]
        return hostile.kv_array(key, item, items, count=count)
    if kind == hostile.STR:
        return hostile.kv(key, kind, str(value))
    try:
        return hostile.kv(key, kind, value)
    except (struct.error, TypeError, OverflowError):
        return hostile.kv(key, kind, 0.0 if kind in (hostile.F32, hostile.F64) else 0)


def fuzz_gguf(examples: int, run: Run) -> None:
    @seed(SEED[0])
    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(EDITS, KVS, st.booleans())
    def body(
        edits: list[tuple[int, int, int]], kvs: list[tuple[str, int, Any]], built: bool
    ) -> None:
        if built:
            blob = hostile.gguf_bytes([*hostile.model_kvs(), *(_kv(*kv) for kv in kvs)])
            run.attempt(_read_gguf, _edit(blob, edits[:2]))
        else:
            run.attempt(_read_gguf, _edit(BASE_GGUF, edits))

    body()


# -- manifests ------------------------------------------------------------------------------
def _load_text(text: str) -> None:
    from snapbuild.manifest import loader

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fuzz.yaml"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        loader.load_manifest(path)


YAML_BITS = st.sampled_from(
    [
        "&a ",
        "*a",
        "<<: *a",
        "[",
        "]",
        "{",
        "}",
        ": ",
        "- ",
        "#",
        "'",
        '"',
        "\n",
        "  ",
        "!!python/object ",
        "!!binary ",
        "? ",
        "|",
        ">",
        "%YAML 1.2\n",
        "---\n",
        "...",
        "\t",
        "\x00",
        "\u2028",
        "~",
        "0x",
        "1e999",
        ".nan",
        "-.inf",
        "yes",
        "null",
        "9" * 30,
    ]
)


def _aliases(levels: int, fanout: int) -> str:
    """Anchors that each repeat the previous one ``fanout`` times: fanout^levels nodes."""
    lines = ["x-a0: &a0 [lol]"]
    for i in range(1, levels + 1):
        lines.append(f"x-a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * fanout) + "]")
    return "\n".join(lines) + "\n"


def _nested(depth: int, flow: bool) -> str:
    if flow:
        return "x-deep: " + "[" * depth + "]" * depth + "\n"
    return "".join("  " * i + f"x{i}:\n" for i in range(depth)) + "  " * depth + "v: 1\n"


# structures a line edit never reaches: alias chains and deep nesting, appended as a key
BOMBS = st.one_of(
    st.just(""),
    st.builds(_aliases, st.integers(1, 12), st.integers(1, 12)),
    st.builds(_nested, st.integers(1, 3000), st.booleans()),
)


def fuzz_manifest(examples: int, run: Run) -> None:
    lines = MANIFEST.splitlines(keepends=True)

    @seed(SEED[0])
    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(
        st.lists(st.tuples(st.integers(0, len(lines)), st.integers(0, 200), YAML_BITS), max_size=6),
        st.lists(st.integers(0, len(lines)), max_size=3),
        st.text(max_size=40),
        BOMBS,
    )
    def body(inserts: list[tuple[int, int, str]], drops: list[int], noise: str, bomb: str) -> None:
        edited = list(lines) + [bomb]
        for index in sorted(set(drops), reverse=True):
            if index < len(edited):
                del edited[index]
        for index, column, bit in inserts:
            if edited:
                at = index % len(edited)
                edited[at] = edited[at][:column] + bit + edited[at][column:]
        run.attempt(_load_text, "".join(edited) + noise)

    body()


SEED = [0]
TARGETS = {"gguf": fuzz_gguf, "manifest": fuzz_manifest}


def main() -> None:
    target, examples, SEED[0] = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    run = Run()
    started = time.monotonic()
    TARGETS[target](examples, run)
    crashes = {
        key: {"inputs": run.counts[key], "smallest": repr(data[:300])}
        for key, data in run.crashes.items()
    }
    keep = os.environ.get("SNAPBUILD_FUZZ_KEEP")  # a directory: each crash's smallest input
    for index, data in enumerate(run.crashes.values()):
        if keep:
            raw = data if isinstance(data, bytes) else data.encode("utf-8", "surrogatepass")
            (Path(keep) / f"{target}-{index}").write_bytes(raw)
    print(
        json.dumps(
            {
                "target": target,
                "tried": run.tried,
                "seconds": round(time.monotonic() - started, 1),
                "crashes": crashes,
            }
        )
    )
