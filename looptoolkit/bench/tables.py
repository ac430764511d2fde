"""The one table model of every report, rendered as Markdown and, by rich, for the terminal.

A [`Table`][looptoolkit.bench.tables.Table] holds text cells; rich lays them out within ``width``
columns (80 by default), wrapping inside a cell where it must, and the notes under the table are
wrapped to the same width.
"""

from __future__ import annotations

import io
import textwrap
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Table", "wrap"]

_STYLE: dict[str, Any] = dict(
    title_justify="left", title_style=None, header_style=None, show_edge=False, pad_edge=False
)


def wrap(text: str, width: int = 80, indent: str = "") -> str:
    """Wrap ``text`` to ``width`` columns; continuation lines indented by ``indent``."""
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
        align: ``"l"`` or ``"r"`` per column (default: the first column left, the others right).
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
        return self.align or "l" + "r" * (len(self.header) - 1)

    def markdown(self) -> str:
        """The table as a Markdown pipe table (no title), then its notes (a list if several)."""
        rule = "|" + "|".join("---:" if a == "r" else "---" for a in self._align()) + "|"
        lines = [self.header, *self.rows]
        cells = ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in lines]
        out = "\n".join([cells[0], rule, *cells[1:]]) + "\n"
        notes = self.notes if len(self.notes) == 1 else [f"- {n}" for n in self.notes]
        return out + ("\n" + "\n".join(notes) + "\n" if notes else "")

    def text(self, width: int = 80) -> str:
        """The table laid out by rich in at most ``width`` columns, then its notes, wrapped."""
        try:
            from rich import box
            from rich.console import Console
            from rich.table import Table as RichTable
        except ImportError:
            raise ImportError(
                "rich is not installed; install it with `pip install 'looptoolkit[bench]'`."
            ) from None
        table = RichTable(title=self.title or None, box=box.SIMPLE_HEAD, **_STYLE)
        for name, side in zip(self.header, self._align(), strict=True):
            table.add_column(name, justify="right" if side == "r" else "left", overflow="fold")
        for row in self.rows:
            table.add_row(*row)
        buffer = io.StringIO()
        Console(file=buffer, width=width, color_system=None, highlight=False).print(table)
        lines = [line.rstrip() for line in buffer.getvalue().rstrip("\n").splitlines()]
        return "\n".join(lines + [wrap(n, width, "  ") for n in self.notes])
