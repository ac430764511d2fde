"""Benchmark harnesses behind ``looptoolkit compare`` and ``looptoolkit transfer``.

They time, they never assert: see ``benchmarks/`` for the runnable scripts and
``docs/benchmarks.md`` for the protocol and the latest results.
"""
