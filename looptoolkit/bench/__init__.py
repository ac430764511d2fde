"""Benchmark harnesses behind ``looptoolkit compare`` and ``looptoolkit transfer``.

They time, never assert; ``docs/benchmarks.md`` has the protocol and the latest results.
"""
