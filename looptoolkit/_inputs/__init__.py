"""What the rows are: the one entry that recognises every kind of ``data``.

- ``habits``: a ``TensorDataset`` as its tensors; DataLoader-only arguments refused;
- ``advice``: ``MADV_RANDOM`` on the memmaps an order reads scattered.
"""
