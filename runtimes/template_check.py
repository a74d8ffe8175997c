"""Chat templates checked before use: rendered in a sandbox, in a child process with time and
memory limits, the way the engine will render them.

A GGUF's ``tokenizer.chat_template`` (or a manifest's ``model.chat-template``) is code that
llama-server runs on every chat request. A template that doubles a string 40 times takes
llama-server to 19 GB within a minute; a macro that calls itself crashes it; ``include``, a
syntax error or ``range(10**12)`` fail only when the snap is serving. ``new``, ``validate`` and
``make`` therefore render each template once here, on sample conversations, with llama.cpp's
template semantics (its Jinja engine, ``common/jinja``: the Jinja2 language without ``include``,
``import`` or ``extends``, with ``raise_exception`` and ``strftime_now``, the ``loopcontrols`` and
``{% generation %}`` tags) under Jinja2's ``SandboxedEnvironment`` (no attribute access to Python
internals, ``range`` capped), in a child capped by :data:`LIMITS`.

What it refuses (a :class:`TemplateProblem` of level ``error``): a syntax error, ``include`` /
``import`` / ``extends``, output beyond the limit, more memory or time than the limits, endless
recursion, a sandbox violation. A template that only raises its own error for every sample
conversation, or trips over a difference between Jinja2 and llama.cpp's engine, is a warning:
the sample may simply not be the conversation it expects.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from typing import Literal

Level = Literal["error", "warning"]


@dataclass(frozen=True)
class TemplateLimits:
    """What rendering one sample conversation may cost."""

    cpu_seconds: int = 2  # real templates render a sample in milliseconds
    memory: int = 256 << 20  # address space of the checking child (Python and jinja2: ~40 MB)
    output: int = 256 << 10  # a four-message sample renders to well under 1 KB


LIMITS = TemplateLimits()

SAMPLES: tuple[tuple[dict[str, str], ...], ...] = (
    (
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Hello!"},
        {"role": "assistant", "content": "Hi. How can I help?"},
        {"role": "user", "content": "Name a colour."},
    ),
    ({"role": "user", "content": "Hello!"},),
)


@dataclass(frozen=True)
class TemplateProblem:
    """Why a template cannot be used (``error``) or may not work (``warning``)."""

    level: Level
    message: str
    line: int | None = None

    def describe(self, name: str) -> str:
        where = f" (line {self.line})" if self.line else ""
        return f"{name}{where}: {self.message}"


def check_template(
    template: str, *, bos_token: str = "", eos_token: str = ""
) -> TemplateProblem | None:
    """Render ``template`` in the sandboxed child; None when it renders within the limits."""
    return _checked(template, bos_token, eos_token)


@cache
def _checked(template: str, bos_token: str, eos_token: str) -> TemplateProblem | None:
    request = json.dumps({"template": template, "bos_token": bos_token, "eos_token": eos_token})
    try:
        proc = subprocess.run(
            [sys.executable, "-I", "-c", CHILD, str(LIMITS.output), json.dumps(SAMPLES)],
            input=request,
            capture_output=True,
            text=True,
            timeout=LIMITS.cpu_seconds * 3 + 10,
            preexec_fn=_limit_child,
        )
    except subprocess.TimeoutExpired:
        return TemplateProblem("error", _time_message())
    if proc.returncode != 0 or not proc.stdout.strip():
        return TemplateProblem("error", _death(proc.returncode, proc.stderr))
    answer = json.loads(proc.stdout)
    if answer.get("level") is None:
        return None
    return TemplateProblem(answer["level"], answer["message"], answer.get("line"))


def _limit_child() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (LIMITS.memory, LIMITS.memory))
    resource.setrlimit(resource.RLIMIT_CPU, (LIMITS.cpu_seconds, LIMITS.cpu_seconds + 1))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _time_message() -> str:
    return f"rendering a sample conversation took more than {LIMITS.cpu_seconds} s"


def _death(code: int, stderr: str) -> str:
    """Why the child died: the CPU limit (SIGXCPU, SIGKILL) or a crash."""
    if code in (-24, -9):
        return _time_message()
    last = stderr.strip().splitlines()[-1:] or [f"exit status {code}"]
    return f"rendering a sample conversation crashed the renderer ({last[0][:200]})"


# The child: stdin {template, bos_token, eos_token} -> stdout {level, message, line}. Only
# jinja2 is imported, so a check costs a Python start-up; the limits are set before it runs.
CHILD = r"""
import json, sys, time
import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import SandboxedEnvironment, SecurityError

LIMIT = int(sys.argv[1]) if len(sys.argv) > 1 else 256 << 10

class Generation(Extension):
    # llama.cpp's {% generation %}...{% endgeneration %}: renders its body
    tags = {"generation"}
    def parse(self, parser):
        next(parser.stream)
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return body

def answer(level=None, message=None, line=None):
    print(json.dumps({"level": level, "message": message, "line": line}))
    sys.exit(0)

def raise_exception(message):
    raise jinja2.TemplateError(str(message))

def strftime_now(fmt):
    return time.strftime(fmt)

request = json.load(sys.stdin)
env = SandboxedEnvironment(extensions=["jinja2.ext.loopcontrols", "jinja2.ext.do", Generation])
env.globals.update(raise_exception=raise_exception, strftime_now=strftime_now)
try:
    tree = env.parse(request["template"])
except jinja2.TemplateSyntaxError as exc:
    answer("error", f"syntax error: {exc.message}", exc.lineno)
for kind, name in ((nodes.Include, "include"), (nodes.Import, "import"),
                   (nodes.FromImport, "from ... import"), (nodes.Extends, "extends")):
    for node in tree.find_all(kind):
        answer("error", f"uses {{% {name} %}}, which llama.cpp's template engine does not have",
               node.lineno)
template = env.from_string(request["template"])
SAMPLES = json.loads(sys.argv[2]) if len(sys.argv) > 2 else []
raised = []
for messages in SAMPLES:
    context = {"messages": messages, "add_generation_prompt": True,
               "bos_token": request["bos_token"], "eos_token": request["eos_token"]}
    written = 0
    try:
        for piece in template.generate(**context):
            written += len(piece)
            if written > LIMIT:
                answer("error", f"wrote more than {LIMIT} characters for a sample conversation "
                       f"of {len(messages)} messages (runaway output)")
    except SecurityError as exc:
        answer("error", f"does what the sandbox forbids: {exc}")
    except RecursionError:
        answer("error", "recurses without end rendering a sample conversation")
    except MemoryError:
        answer("error", "needs more memory than the check allows for a sample conversation")
    except OverflowError as exc:
        answer("error", f"asks for a runaway amount of work ({exc})")
    except jinja2.TemplateError as exc:
        raised.append(str(exc))
        continue
    except Exception as exc:
        raised.append(f"{type(exc).__name__}: {exc}")
        continue
    answer()
answer("warning", "raised an error for every sample conversation (" + "; ".join(raised)[:300]
       + "); check it with the conversations the model expects")
"""
