"""The capabilities a manifest may declare for an engine, which the service proves at start.

Kept apart (and free of imports) so that the snap's light commands (``status``, hooks) and the
toolkit can name them without importing the gateway; the checks themselves are in
:mod:`runtimes.gateway.proofs`.
"""

from __future__ import annotations

from typing import Literal

Capability = Literal["text", "vision", "tools"]
CAPABILITIES: tuple[Capability, ...] = ("text", "vision", "tools")
