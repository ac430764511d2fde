"""The README's tour: its first ```python block, run as a script.

``python tests/readme_tour.py README.md`` runs it (``make dist`` does, in a
fresh venv with only the wheel and its core dependencies); ``test_readme.py``
runs it in the test suite.
"""

from __future__ import annotations

import pathlib
import re
import sys


def tour(readme: pathlib.Path) -> str:
    """The code of the README's first ```python block."""
    blocks = re.findall(r"```python\n(.*?)```", readme.read_text(), re.S)
    if not blocks:
        raise ValueError(f"{readme} has no ```python block.")
    return blocks[0]


if __name__ == "__main__":
    path = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "README.md")
    exec(compile(tour(path), str(path), "exec"), {"__name__": "readme_tour"})
    print("README tour: ok")
