"""Editing a manifest in place (``fetch --record``'s :func:`record_in_text`): the new values
go in, and comments, quoting, indentation and line endings stay as the author wrote them; a
layout ruamel.yaml cannot reproduce is refused rather than reformatted."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from snapbuild.manifest.edit import record_in_text
from snapbuild.manifest.loader import parse_manifest
from snapcommon.errors import ManifestError

SHA = hashlib.sha256(b"weights").hexdigest()
ZEROS = "0" * 64


def test_record_in_text_keeps_line_endings_and_quoting() -> None:
    crlf = (
        "artifacts:\r\n"
        "  - name: a\r\n"
        "    files:\r\n"
        "      - placeholder: true\r\n"
        "        path: f\r\n"
        "        sha256: 00\r\n"
        "        size: 1 # guess\r\n"
        "      - {path: g, sha256: '00', size: 2, placeholder: true}\r\n"
    )
    digits = "1" * 64
    assert record_in_text(crlf, "a", "f", sha256=digits, size=7) == crlf.replace(
        "placeholder: true\r\n        path", "placeholder: false\r\n        path"
    ).replace("sha256: 00\r\n", f'sha256: "{digits}"\r\n').replace("size: 1 #", "size: 7 #")
    assert record_in_text(crlf, "a", "g", sha256=SHA, size=9) == crlf.replace(
        "{path: g, sha256: '00', size: 2, placeholder: true}",
        f"{{path: g, sha256: '{SHA}', size: 9, placeholder: false}}",
    )


def test_record_in_the_shipped_gemma3_manifest_changes_only_that_entry() -> None:
    """A shipped manifest (comments, long urls, flow lists, block text) survives the round trip:
    only the recorded entry's lines differ, and its end-of-line comment keeps its column."""
    text = (Path(__file__).parent.parent / "manifests" / "gemma3.yaml").read_text()
    old = (
        f'        sha256: "{ZEROS}"\n'
        '        size: 2490000000   # "2.49 GB" on the repository page\n'
        "        placeholder: true\n"
        "  - name: gemma3-4b-q8-0\n"
    )
    new = (
        f'        sha256: "{SHA}"\n'
        '        size: 123          # "2.49 GB" on the repository page\n'
        "  - name: gemma3-4b-q8-0\n"
    )
    assert text.count(old) == 1
    edited = record_in_text(
        text, "gemma3-4b-q4-k-m", "gemma-3-4b-it-Q4_K_M.gguf", sha256=SHA, size=123
    )
    assert edited == text.replace(old, new)
    got = parse_manifest(edited).artifact("gemma3-4b-q4-k-m").files[0]
    assert (got.sha256, got.size, got.placeholder) == (SHA, 123, False)


def test_record_in_text_moves_comment_lines_below_the_placeholder() -> None:
    text = (
        "artifacts:\n"
        "- name: a\n"
        "  files:\n"
        "  - path: f   # the file\n"
        "    sha256: 'x'\n"
        "    size: 1\n"
        "    placeholder: true   # guessed\n"
        "    # nobody checked it\n"
        "\n"
        "  # the next file\n"
        "  - path: g\n"
    )
    assert record_in_text(text, "a", "f", sha256=SHA, size=5) == (
        "artifacts:\n"
        "- name: a\n"
        "  files:\n"
        "  - path: f   # the file\n"
        f"    sha256: '{SHA}'\n"
        "    size: 5\n"
        "    # nobody checked it\n"
        "\n"
        "  # the next file\n"
        "  - path: g\n"
    )


def test_record_in_text_refuses_a_layout_it_cannot_keep() -> None:
    """Mixed indentation cannot be dumped back as written: refused, never reformatted."""
    text = (
        "artifacts:\n"
        "  - name: a\n"
        "    files:\n"
        "    - path: f\n"
        "      sha256: 'x'\n"
        "      size: 1\n"
        "      placeholder: true\n"
    )
    with pytest.raises(ManifestError) as caught:
        record_in_text(text, "a", "f", sha256=SHA, size=5)
    assert str(caught.value) == "cannot record into this manifest without changing its layout"
    assert caught.value.details == f"a/f: size 5, sha256 {SHA}"
