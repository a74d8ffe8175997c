"""The one way to get the host a decision is for: a recorded profile, a machine root, or this
machine.

The toolkit's ``--host``/``--host-root`` options, the snap's ``SNAPBUILD_HOST_PROFILE`` /
``SNAPBUILD_HOST_ROOT`` variables and the fleet planner's recorded machines all mean the same
three things; they share this function so that a profile file is read, and a root is probed,
the same way everywhere, with the same messages when it fails.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from hwprobe.profile import HostProfile, error_message
from snapcommon.errors import UsageError

PROFILE_FIX = "give a file written by `hwprobe --json`"


def load_host(*, profile: str | Path | None = None, root: str | Path | None = None) -> HostProfile:
    """The host profile in the JSON file ``profile``; else the machine under ``root`` probed;
    else this machine probed. A profile that cannot be read or is not a profile raises
    :class:`UsageError` naming the file and the fields."""
    if profile:
        return _read_profile(Path(profile))
    from hwprobe import probe

    return probe(str(root or "/"))


def _read_profile(path: Path) -> HostProfile:
    try:
        return HostProfile.from_json(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(
            f"cannot read host profile {path}", details=str(exc), resolution=PROFILE_FIX
        ) from None
    except UnicodeDecodeError as exc:
        raise UsageError(
            f"{path} is not a host profile",
            details=f"not UTF-8 text (byte {exc.start}): a profile is JSON",
            resolution=PROFILE_FIX,
        ) from None
    except ValidationError as exc:
        raise UsageError(
            f"{path} is not a host profile",
            details="\n".join(
                f"{'.'.join(str(p) for p in e['loc']) or '(top level)'}: {error_message(e)}"
                for e in exc.errors()[:10]
            ),
            resolution=PROFILE_FIX,
        ) from None
