"""The shell commands of the docs: the fenced ``bash``/``sh``/``console`` blocks and the inline
code spans of README.md and docs/*.md, cut into simple commands, for tests/test_docs.py.

A console block's commands are its ``$ `` lines (and their ``\\`` continuations); the rest is
output. Cutting is quote-aware (``'…'``, ``"…"``, ``$(…)`` nested), drops comments, and
finds commands inside ``$(…)`` too; words before the command name that assign a variable
(``TOCSIN_STORE=… tocsin …``) or are shell keywords (``do tocsin …``) are skipped.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

__all__ = ["DocBlock", "doc_blocks", "simple_commands", "words"]

SHELLS = {"bash", "sh", "shell", "console"}
_FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
_INLINE = re.compile(r"(?<!`)`([^`]+)`(?!`)")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_KEYWORDS = {"do", "then", "else", "time", "!", "{", "if", "while", "until"}


@dataclass(frozen=True)
class DocBlock:
    """A shell snippet of the docs: where it is and the script it amounts to."""

    where: str
    """``file:line`` of its first line."""
    script: str
    """The commands as a shell script (a console block's output left out)."""


def doc_blocks(root: Path) -> list[DocBlock]:
    """Every shell block and every inline span that starts with ``tocsin`` or ``curl``, in
    README.md then docs/*.md order."""
    found: list[DocBlock] = []
    for path in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
        text = path.read_text()
        name = path.relative_to(root)
        fenced: list[tuple[int, int]] = []
        for match in _FENCE.finditer(text):
            fenced.append(match.span())
            if match.group(1) in SHELLS:
                line = text.count("\n", 0, match.start(2)) + 1
                body = match.group(2)
                script = _console_script(body) if match.group(1) == "console" else body
                found.append(DocBlock(where=f"{name}:{line}", script=script))
        for match in _INLINE.finditer(text):
            if any(a <= match.start() < b for a, b in fenced):
                continue
            span = " ".join(match.group(1).replace("\\|", "|").split())  # a table's \|
            if span.startswith(("tocsin ", "curl ")):
                line = text.count("\n", 0, match.start()) + 1
                found.append(DocBlock(where=f"{name}:{line}", script=span))
    return found


def _console_script(body: str) -> str:
    lines, going_on = [], False
    for line in body.splitlines():
        if line.startswith("$ "):
            lines.append(line[2:])
        elif going_on:
            lines.append(line)
        else:
            continue
        going_on = line.rstrip().endswith("\\")
    return "\n".join(lines) + "\n"


def simple_commands(script: str) -> list[str]:
    """The simple commands of ``script`` (split at ``;``, ``|``, ``&``, newlines and
    parentheses, comments dropped), those inside ``$(…)`` included."""
    commands: list[str] = []
    inner: list[str] = []
    stack: list[tuple[str, int]] = []  # ('"', _) or ('$(', start) / ('(', _)
    start, i, n = 0, 0, len(script)

    def cut(end: int) -> None:
        if script[start:end].strip():
            commands.append(script[start:end].replace("\\\n", " ").strip())

    while i < n:
        c = script[i]
        in_quotes = bool(stack) and stack[-1][0] == '"'
        if c == "\\":
            i += 2
            continue
        if in_quotes:
            if c == '"':
                stack.pop()
            elif script.startswith("$(", i):
                stack.append(("$(", i + 2))
                i += 1
        elif c == "'":
            end = script.find("'", i + 1)
            i = n if end < 0 else end + 1
            continue
        elif c == '"':
            stack.append(('"', i))
        elif script.startswith("$(", i):
            stack.append(("$(", i + 2))
            i += 1
        elif c == "(":
            if not stack:
                cut(i)
                start = i + 1
            stack.append(("(", i))
        elif c == ")" and stack:
            kind, opened = stack.pop()
            if kind == "$(":
                inner.append(script[opened:i])
            elif not stack:
                cut(i)
                start = i + 1
        elif not stack and c == "#" and (i == 0 or script[i - 1] in " \t\n;(|&"):
            cut(i)
            end = script.find("\n", i)
            i = start = n if end < 0 else end
            continue
        elif not stack and c in ";|&\n":
            cut(i)
            start = i + 1
        i += 1
    if not stack:
        cut(n)
    for text in inner:
        commands.extend(simple_commands(text))
    return commands


def words(command: str) -> list[str]:
    """The words of a simple command from its command name on (assignments and keywords
    before it skipped)."""
    try:
        split = shlex.split(command)
    except ValueError:  # quotes nested the shell's way inside $(…)
        split = command.split()
    while split and (_ASSIGNMENT.match(split[0]) or split[0] in _KEYWORDS):
        split.pop(0)
    return split
