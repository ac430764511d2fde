"""The one table model of every report, rendered as Markdown and, by rich, for the terminal.

A [`Table`][looptoolkit.bench.tables.Table] holds text cells.
[`Table.markdown`][looptoolkit.bench.tables.Table.markdown] renders a pipe table;
[`Table.text`][looptoolkit.bench.tables.Table.text] has ``rich.table.Table`` lay the same cells
out within ``width`` characters (80 by default: column widths, wrapping inside a cell where it
must). Notes under a table (a legend, footnotes) are wrapped to the same width.
"""

from __future__ import annotations

import io
import textwrap
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Table", "render", "wrap"]


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
        name     ms
        ───────────
        a       1.0
        bb     10.0
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

    def rich(self) -> Any:
        """The table as a ``rich.table.Table`` (title above, left-aligned; no notes)."""
        table = _rich_table(self.title)
        for name, side in zip(self.header, self._align(), strict=True):
            table.add_column(name, justify="right" if side == "r" else "left", overflow="fold")
        for row in self.rows:
            table.add_row(*row)
        return table

    def text(self, width: int = 80) -> str:
        """The table laid out by rich in at most ``width`` columns, then its notes, wrapped."""
        out = [render(self.rich(), width)]
        out += [wrap(note, width, "  ") for note in self.notes]
        return "\n".join(out)


def _rich_table(title: str) -> Any:
    try:
        from rich import box
        from rich.table import Table as RichTable
    except ImportError:
        raise ImportError(
            "rich is not installed; install it with `pip install 'looptoolkit[bench]'`."
        ) from None
    return RichTable(
        title=title or None,
        title_justify="left",
        title_style=None,
        header_style=None,
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
    )


def render(renderable: Any, width: int = 80) -> str:
    """What rich prints for ``renderable`` at ``width`` columns, as plain text (no colour)."""
    from rich.console import Console

    buffer = io.StringIO()
    console = Console(file=buffer, width=width, color_system=None, highlight=False)
    console.print(renderable)
    return "\n".join(line.rstrip() for line in buffer.getvalue().rstrip("\n").splitlines())
