"""What the manual's pages quote of the product's lines, to compare with what the code prints.

A page quotes a line in backticks; in a quote `<name>` stands for any text (a file, a key)
and `...` for the rest that the page leaves out. A line the code printed is documented when a
quote on the page matches it whole, with or without its leading `Config error: `,
`Data error: ` or `sporeflow <command>: ` (a table row quotes the first line in full and its
variants after it without repeating the prefix); a quote with another prefix does not match.
"""

from __future__ import annotations

import re

from helpers.train import REPO

QUOTE = re.compile(r"`([^`\n]+)`")
PREFIX = re.compile(r"^(Config error: |Data error: |sporeflow [\w-]+: )")


def quotes(page: str) -> list[str]:
    """The backticked spans of a page of docs/ that quote a line: some words of it, not only
    a placeholder (`<run dir>` matches anything)."""
    found = QUOTE.findall((REPO / "docs" / page).read_text())
    return [q for q in found if len(re.sub(r"<[^<>]*>|\.\.\.", "", q)) >= 20]


def pattern(quote: str) -> re.Pattern:
    """A quote as the lines it stands for: `<...>` any text, `...` any rest."""
    parts = re.split(r"(<[^<>\s][^<>]*>|\.\.\.)", quote)
    return re.compile(
        "".join(
            ".*" if p == "..." else ".+?" if p.startswith("<") and p.endswith(">") else re.escape(p)
            for p in parts
        )
    )


def documented(line: str, page: str) -> list[str]:
    """The quotes on `page` that match `line` (empty: the page does not show it)."""
    forms = {line, PREFIX.sub("", line)}
    return [q for q in quotes(page) if any(pattern(q).fullmatch(f) for f in forms)]
