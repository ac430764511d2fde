"""Leaf types every layer shares: below the backends and everything that uses them.

- ``errors``: [`TransferError`][looptoolkit.TransferError] and the argument checks;
- ``target``: the device ``Target`` a device argument parses into;
- ``dtypes``: dtype names and the cast rules (which side of a copy casts);
- ``node``: how optree looks into a container (``Node``, ``Ref``);
- ``background``: the background thread, its bounded queue and the stop signal a
  long read checks (used by the pipeline's prefetch and by store reads).
"""
