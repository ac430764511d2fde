"""The one table model of every report: text cells, rendered as Markdown or laid out by rich."""

from __future__ import annotations

import io
import textwrap
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Table", "wrap"]

_STYLE: dict[str, Any] = dict(show_edge=False, pad_edge=False)


def wrap(text: str, width: int = 80, indent: str = "") -> str:
    """Wrap ``text`` to ``width`` columns; continuation lines indented by ``indent``."""
    return textwrap.fill(
        text, width, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False
    )


@dataclass
class Table:
    """Text cells under column names, with a title and notes; ``align``: ``"l"``/``"r"`` each."""

    title: str
    header: list[str]
    rows: list[list[str]]
    align: str | None = None
    notes: list[str] = field(default_factory=list)

    def _align(self) -> str:
        """The alignment of each column."""
        return self.align or "l" + "r" * (len(self.header) - 1)

    def markdown(self) -> str:
        """A Markdown pipe table (no title), then its notes (a list if several)."""
        rows = [" | ".join(c.replace("|", "\\|") for c in row) for row in [self.header, *self.rows]]
        rule = "|".join("---:" if a == "r" else "---" for a in self._align())
        lines = [f"| {rows[0]} |", f"|{rule}|", *(f"| {row} |" for row in rows[1:])]
        if self.notes:
            lines += ["", *(self.notes if len(self.notes) == 1 else [f"- {n}" for n in self.notes])]
        return "\n".join(lines) + "\n"

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
        table = RichTable(box=box.SIMPLE_HEAD, **_STYLE)
        for name, side in zip(self.header, self._align(), strict=True):
            table.add_column(name, justify="right" if side == "r" else "left", overflow="fold")
        for row in self.rows:
            table.add_row(*row)
        buffer = io.StringIO()
        Console(file=buffer, width=width, color_system=None, markup=False).print(table)
        lines = [line.rstrip() for line in buffer.getvalue().rstrip("\n").splitlines()]
        title = [wrap(self.title, width)] if self.title else []  # the page's width, not the table's
        return "\n".join(title + lines + [wrap(n, width, "  ") for n in self.notes])
