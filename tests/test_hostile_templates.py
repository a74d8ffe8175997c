"""Hostile chat templates: refused by ``new``, ``validate`` and ``make`` before llama-server
ever runs them, with a message that names the template, each command bounded in memory and
time (the check itself renders in a child capped by runtimes.template_check.LIMITS)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import hostile
from support.bounded import MIB, Bounded, snapbuild
from support.tiny_models import smollm2_gguf_path

from runtimes.chat_templates import families
from runtimes.template_check import check_template

PEAK = 300 * MIB
SECONDS = 40.0


def _bounded(result: Bounded, what: str) -> None:
    print(f"{what}: {result.describe()}")
    assert not result.timed_out and result.peak_rss < PEAK and result.seconds < SECONDS, what
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("case", sorted(hostile.HOSTILE_TEMPLATES))
def test_a_gguf_template_is_refused_by_new_validate_and_make(tmp_path: Path, case: str) -> None:
    template, reason = hostile.HOSTILE_TEMPLATES[case]
    good, bad = tmp_path / "model.gguf", tmp_path / "bad.gguf"
    good.write_bytes(hostile.model_gguf())
    bad.write_bytes(hostile.model_gguf(template=template))
    result = snapbuild("new", str(bad), "-o", str(tmp_path / "bad.yaml"))
    _bounded(result, f"new with {case}")
    assert result.returncode == 2, result.stderr
    assert "the chat template of bad.gguf (tokenizer.chat_template)" in result.stderr
    assert reason in result.stderr and "no manifest was written" in result.stderr
    assert not (tmp_path / "bad.yaml").exists()
    # a manifest made for a sound file, whose file is then swapped for the hostile one
    manifest = tmp_path / "m.yaml"
    assert snapbuild("new", str(good), "-o", str(manifest)).returncode == 0
    hostile.swap_file(manifest, good, bad)
    for command in (
        ("validate", str(manifest)),
        ("make", str(manifest), "-o", str(tmp_path / "o")),
    ):
        result = snapbuild(*command)
        _bounded(result, f"{command[0]} with {case}")
        assert result.returncode == 2, result.stderr
        assert "the chat template of model.gguf (tokenizer.chat_template)" in result.stderr
        assert reason in result.stderr
    assert not (tmp_path / "o").exists()


def test_a_manifest_template_is_checked_even_without_the_model_file(tmp_path: Path) -> None:
    good = tmp_path / "model.gguf"
    good.write_bytes(hostile.model_gguf())
    manifest = tmp_path / "m.yaml"
    assert snapbuild("new", str(good), "-o", str(manifest)).returncode == 0
    template = hostile.HOSTILE_TEMPLATES["include"][0]
    text = manifest.read_text().replace(
        "  kind: chat\n", f"  kind: chat\n  chat-template: '{template}'\n"
    )
    manifest.write_text(text)
    good.unlink()
    result = snapbuild("validate", str(manifest))
    _bounded(result, "validate manifest template")
    assert result.returncode == 2
    assert (
        "model.chat-template: the manifest's model.chat-template (line 1): uses {% include %}"
        in result.stderr
    )


def test_real_templates_pass() -> None:
    """The family templates and SmolLM2's own render cleanly."""
    for family in families():
        assert check_template(family.template) is None, family.name
    gguf = smollm2_gguf_path()
    if gguf is not None:
        from runtimes.gguf_file import GgufFile

        assert check_template(GgufFile.open(gguf).value("tokenizer.chat_template")) is None


def test_a_template_that_raises_for_the_samples_is_a_warning() -> None:
    problem = check_template("{{ raise_exception('roles must alternate') }}")
    assert problem is not None and problem.level == "warning"
    assert "roles must alternate" in problem.message


def test_serve_refuses_a_template_it_cannot_run_safely(tmp_path: Path) -> None:
    """`snapbuild serve` checks the template llama-server would run before starting it (it
    took llama-server to 19 GB within a minute)."""
    good, bad = tmp_path / "model.gguf", tmp_path / "bad.gguf"
    good.write_bytes(hostile.model_gguf())
    bad.write_bytes(hostile.model_gguf(template=hostile.HOSTILE_TEMPLATES["doubling"][0]))
    manifest = tmp_path / "m.yaml"
    assert snapbuild("new", str(good), "-o", str(manifest)).returncode == 0
    hostile.swap_file(manifest, good, bad)
    result = snapbuild("serve", str(manifest), "--engine", "cpu", "--port", "auto")
    _bounded(result, "serve with a doubling template")
    assert result.returncode == 2, result.stderr
    assert "(tokenizer.chat_template) cannot be served safely" in result.stderr
