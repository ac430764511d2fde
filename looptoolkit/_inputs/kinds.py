"""What the rows are: step 1 of a Loader's construction, the one entry for every kind of data.

[`rows_of`][looptoolkit._inputs.kinds.rows_of] takes ``data`` as the user passed it and
returns the rows object that owns that kind's checks, handing the data down the layers
once: a dataset object becomes its tensors here (``habits``), a
[`Mix`][looptoolkit.Mix] becomes rows over its columns (``looptoolkit.mix``), ragged inputs
become ragged rows (``looptoolkit.ragged``), and everything else (arrays, memmaps, stores,
TensorDicts) rectangular rows (``looptoolkit._rows``), which refuse per-sample records.
Each rows object then builds its own order (step 2) and is delivered by the pipeline
(step 3).
"""

from __future__ import annotations

from typing import Any

from looptoolkit._inputs.habits import dataset_data
from looptoolkit.mix._loader import rows_of as mix_rows_of
from looptoolkit.mix._mix import Mix

__all__ = ["rows_of"]


def rows_of(
    data: Any, batch_size: Any, ragged_args: dict[str, Any], cache_bytes: int | None
) -> Any:
    """The rows object of ``data``, whatever its kind.

    Args:
        data: what the user passed: a pytree of arrays, memmaps or stores, a
            ``TensorDataset``, tokenizer lists or ragged columns under keys, a
            [`Mix`][looptoolkit.Mix].
        batch_size: rows per batch (ragged layouts check it with their options).
        ragged_args: the ragged options by name (refused for data without ragged leaves).
        cache_bytes: the chunk cache of store data.

    Returns:
        [`Rows`][looptoolkit._rows.rows.Rows], [`RaggedRows`][looptoolkit.ragged._loader.RaggedRows]
        or [`MixedRows`][looptoolkit.mix._loader.MixedRows]: ``order(options)`` gives the
        epoch order, ``check_delivery(resident, return_mask)`` refuses what the kind does
        not offer.

    Raises:
        TypeError: a dataset object other than a ``TensorDataset``, a leaf that is not an
            array, a list of per-sample records.
        ValueError: the checks of the data's kind.
    """
    if not isinstance(data, Mix):  # a mixture's sources are checked by the mixture
        data = dataset_data(data)
    return mix_rows_of(data, batch_size, ragged_args, cache_bytes)
