"""What the tests read out of the README and the docs: the quick start's commands and every link."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from tests import REPO

PROJECT = REPO
README = PROJECT / "README.md"

_FENCE = re.compile(r"^```")
_LINK = re.compile(r"(?<!!)\[(?:[^\]\\]|\\.)*\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def section(text: str, heading: str) -> str:
    """The body of the ``## heading`` section, up to the next heading of the same or a higher level."""
    lines = text.splitlines()
    for index, line in enumerate(lines):
        found = _HEADING.match(line)
        if found and found.group(2) == heading:
            level = len(found.group(1))
            body: list[str] = []
            for rest in lines[index + 1 :]:
                other = _HEADING.match(rest)
                if other and len(other.group(1)) <= level and not _in_fence(body):
                    break
                body.append(rest)
            return "\n".join(body)
    raise LookupError(f"no section {heading!r}")


def _in_fence(lines: list[str]) -> bool:
    return sum(1 for line in lines if _FENCE.match(line)) % 2 == 1


def quick_start_commands(text: str) -> list[str]:
    """The command lines of the quick start's first ``sh`` block, comments and blank lines left out."""
    body = section(text, "Quick start")
    block = re.search(r"^```sh\n(.*?)^```", body, re.DOTALL | re.MULTILINE)
    if block is None:
        raise LookupError("the quick start has no ```sh block")
    commands = []
    for line in block.group(1).splitlines():
        command = line.split(" #", 1)[0].strip()
        if command and not command.startswith("#"):
            commands.append(command)
    return commands


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, markup and punctuation dropped, spaces to dashes."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text stays
    text = text.lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every heading's anchor in a Markdown file; repeated headings get -1, -2, ... as on GitHub."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    fenced = False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        heading = _HEADING.match(line)
        if fenced or heading is None:
            continue
        base = slug(heading.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


@dataclass(frozen=True)
class Link:
    source: Path
    line: int
    target: str


def links(path: Path) -> list[Link]:
    """The Markdown links of ``path`` outside code blocks and code spans (which may span lines)."""
    prose: list[str] = []
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            prose.append("")
        else:
            prose.append("" if fenced else line)
    text = "\n".join(prose)
    # A code span keeps its newlines, so that offsets still give line numbers.
    text = re.sub(r"`[^`]*`", lambda span: re.sub(r"[^\n]", " ", span.group(0)), text)
    return [
        Link(path, text.count("\n", 0, match.start()) + 1, match.group(1)) for match in _LINK.finditer(text)
    ]


def broken(link: Link) -> str | None:
    """Why a relative link does not resolve (a missing file, or no such heading there), or None."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", link.target):
        return None  # http(s), mailto: not checked offline
    target, _, fragment = link.target.partition("#")
    file = (link.source.parent / target).resolve() if target else link.source
    where = f"{link.source.relative_to(PROJECT)}:{link.line}: {link.target}"
    if not file.is_relative_to(PROJECT):
        return f"{where}: outside the project"
    if not file.exists():
        return f"{where}: no such file"
    if fragment and file.suffix == ".md" and fragment not in anchors(file.read_text(encoding="utf-8")):
        return f"{where}: no heading #{fragment} in {file.relative_to(PROJECT)}"
    return None
