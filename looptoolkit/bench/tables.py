"""The one table writer of every report: Markdown, and plain text that fits a terminal.

A [`Table`][looptoolkit.bench.tables.Table] holds text cells.
[`Table.markdown`][looptoolkit.bench.tables.Table.markdown] renders a pipe table;
[`Table.text`][looptoolkit.bench.tables.Table.text] renders fixed-width columns within ``width``
characters (80 by default), or, when the cells cannot fit, one block per row (the first cell, then
``header: value`` pairs, wrapped) so that no cell is ever cut or wrapped mid-value. Notes under a
table (a legend, footnotes) are wrapped to the same width.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field

__all__ = ["Table", "wrap"]


def wrap(text: str, width: int = 80, indent: str = "") -> str:
    """Wrap ``text`` to ``width`` columns; continuation lines indented by ``indent``.

    Examples:
        >>> print(wrap("aaa bbb ccc", 8, "  "))
        aaa bbb
          ccc
    """
    return textwrap.fill(
        text, width, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False
    )


@dataclass
class Table:
    """A table of text cells.

    Attributes:
        title: shown above the table.
        header: column names.
        rows: text cells, one list per row.
        align: ``"l"`` or ``"r"`` per column (default: the first column left, the
            others right).
        notes: lines shown under the table.

    Examples:
        >>> t = Table("T", ["name", "ms"], [["a", "1.0"], ["bb", "10.0"]])
        >>> print(t.text())
        T
        name    ms
        ----  ----
        a      1.0
        bb    10.0
        >>> print(t.markdown())
        | name | ms |
        |---|---:|
        | a | 1.0 |
        | bb | 10.0 |
        <BLANKLINE>
    """

    title: str
    header: list[str]
    rows: list[list[str]]
    align: str | None = None
    notes: list[str] = field(default_factory=list)

    def _align(self) -> str:
        if self.align is not None:
            return self.align
        return "l" + "r" * (len(self.header) - 1)

    def markdown(self) -> str:
        """The table as a Markdown pipe table (no title), then its notes (a list if several)."""

        def esc(cell: str) -> str:
            return cell.replace("|", "\\|")

        rule = ["---:" if a == "r" else "---" for a in self._align()]
        lines = ["| " + " | ".join(map(esc, self.header)) + " |", "|" + "|".join(rule) + "|"]
        lines += ["| " + " | ".join(esc(c) for c in row) + " |" for row in self.rows]
        out = "\n".join(lines) + "\n"
        if len(self.notes) == 1:
            out += "\n" + self.notes[0] + "\n"
        elif self.notes:
            out += "\n" + "\n".join(f"- {note}" for note in self.notes) + "\n"
        return out

    def widths(self) -> list[int]:
        """The width of each column: its longest cell or header."""
        cells = [self.header, *self.rows]
        return [max(len(row[i]) for row in cells) for i in range(len(self.header))]

    def text(self, width: int = 80, gap: int = 2) -> str:
        """The table in at most ``width`` columns (fixed columns, or one block per row)."""
        widths = self.widths()
        out = [wrap(self.title, width)] if self.title else []
        if sum(widths) + gap * (len(widths) - 1) <= width:
            align = self._align()

            def line(cells: list[str]) -> str:
                parts = [
                    c.rjust(w) if a == "r" else c.ljust(w)
                    for c, w, a in zip(cells, widths, align, strict=True)
                ]
                return (" " * gap).join(parts).rstrip()

            out.append(line(self.header))
            out.append((" " * gap).join("-" * w for w in widths))
            out += [line(row) for row in self.rows]
        else:
            for row in self.rows:
                pairs = [f"{h}: {c}" for h, c in zip(self.header[1:], row[1:], strict=True) if c]
                out.append(wrap(row[0], width))
                out.append(wrap("    " + ";  ".join(pairs), width, "    "))
        out += [wrap(note, width, "  ") for note in self.notes]
        return "\n".join(out)
