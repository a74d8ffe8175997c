"""How snap-exec expands ``$VAR``: Go's ``os.Expand``, and snapd's conditional forms from 2.77.

A shell's rules do not apply. snapd expands each ``environment:`` value of snap.yaml with Go's
``os.Expand`` (``osutil/env.go:213-243``), which knows no ``${VAR:+word}``: up to 2.76 the whole
text between ``${`` and the first ``}`` names one variable, never set, so
``${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}`` becomes "". From 2.77 that name is searched for
``NAME:+`` / ``NAME:-``, but the name still ends at the first ``}``, so nested braces break in
both. Command-line arguments are expanded with plain ``os.Expand`` in every release, and those
that become empty are dropped (``cmd/snapctl/tool/snap-exec/main.go:153-164``). Getting this
wrong is how a snap works under ``snapbuild try`` and not under snapd, so it is reproduced
exactly; ``tests/test_snapd_env.py`` runs snapd's own unit-test vectors.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

_SHELL_SPECIAL = frozenset("*#$@!?-0123456789")
_CONDITIONAL = re.compile(r"[a-zA-Z0-9_]+:[+-]")


def _shell_name(text: str) -> tuple[str, int]:
    """Go's ``getShellName``: the name after a ``$`` and how many characters it took.

    ``${...}`` takes everything up to the *first* ``}``; ``${}`` and an unterminated ``${`` are
    bad syntax that os.Expand eats; one special character (``$5``, ``$$``) is a name of its own.
    """
    if text[0] == "{":
        if len(text) > 2 and text[1] in _SHELL_SPECIAL and text[2] == "}":
            return text[1], 3
        end = text.find("}", 1)
        if end == 1:
            return "", 2
        if end < 0:
            return "", 1
        return text[1:end], end + 1
    if text[0] in _SHELL_SPECIAL:
        return text[0], 1
    i = 0
    while i < len(text) and (text[i] == "_" or (text[i].isascii() and text[i].isalnum())):
        i += 1
    return text[:i], i


def go_expand(text: str, lookup: Callable[[str], str]) -> str:
    """Expand ``$VAR`` and ``${VAR}`` exactly as Go's ``os.Expand`` does.

    A ``$`` that cannot start a name stays as it is; a name's value is ``lookup(name)``.
    """
    out: list[str] = []
    start = j = 0
    while j < len(text):
        if text[j] == "$" and j + 1 < len(text):
            out.append(text[start:j])
            name, width = _shell_name(text[j + 1 :])
            if name == "" and width == 0:
                out.append("$")
            elif name:
                out.append(lookup(name))
            j += width
            start = j + 1
        j += 1
    return "".join(out) + text[start:]


def snapd_expand(text: str, env: Mapping[str, str], *, conditional: bool) -> str:
    """One ``environment:`` value as snapd expands it (``osutil.Environment.expand``).

    ``conditional`` is snapd 2.77+: a name holding ``NAME:+rest`` gives ``rest`` (expanded
    again) when NAME is non-empty, ``NAME:-rest`` gives it when NAME is empty; anything else is a
    plain lookup, and an unknown name is "".
    """

    def lookup(name: str) -> str:
        found = _CONDITIONAL.search(name) if conditional else None
        if found is None:
            return env.get(name, "")
        value = env.get(name[found.start() : found.end() - 2], "")
        rest = name[found.end() :]
        if name[found.end() - 1] == "-":
            return value or snapd_expand(rest, env, conditional=True)
        return snapd_expand(rest, env, conditional=True) if value else ""

    return go_expand(text, lookup)


def expand_environment(
    env: dict[str, str], entries: Sequence[tuple[str, str]], *, conditional: bool
) -> None:
    """snapd's ``ExtendWithExpanded``: in order, each value expanded against ``env`` as
    extended so far (a later entry sees the earlier ones)."""
    for key, value in entries:
        env[key] = snapd_expand(value, env, conditional=conditional)


def expand_command_args(args: Sequence[str], env: Mapping[str, str]) -> list[str]:
    """snap-exec's ``expandEnvCmdArgs``: plain os.Expand, empty results dropped."""
    expanded = (go_expand(arg, lambda name: env.get(name, "")) for arg in args)
    return [arg for arg in expanded if arg != ""]
