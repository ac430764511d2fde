"""Where the batches go (the delivery): gather, move, transform, hand out.

- ``stream``: one epoch's batch stream, in the loop's thread or a background one;
- ``iterator``: the pass a ``for`` loop runs (``LoaderIterator``);
- ``probe``: the construction-time move of a few rows;
- ``stats``: time waiting for data against time in the step.
"""

from __future__ import annotations

from looptoolkit._pipeline.stream import Plan as Plan

__all__ = ["Plan"]
