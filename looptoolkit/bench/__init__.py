"""Benchmark harnesses behind ``looptoolkit compare`` and ``transfer``: they time, never assert."""
