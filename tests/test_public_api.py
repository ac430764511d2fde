import pytest

import looptoolkit


def test_all_is_sorted_and_exported():
    assert looptoolkit.__all__ == sorted(looptoolkit.__all__)
    for name in looptoolkit.__all__:
        assert getattr(looptoolkit, name) is not None
    assert set(dir(looptoolkit)) == set(looptoolkit.__all__)


def test_public_names():
    assert set(looptoolkit.__all__) == {
        "BatchKeys",
        "ContainerRebuildWarning",
        "FitLayout",
        "Flat",
        "FlatLayout",
        "GetItemsDataset",
        "Loader",
        "LoaderStats",
        "Mix",
        "Order",
        "PackLayout",
        "Packed",
        "PadLayout",
        "Padded",
        "Ragged",
        "RepeatedEpochWarning",
        "StaticBatches",
        "TransferError",
        "__version__",
        "group_size_for",
        "keep_batch",
        "loader_dataset",
        "make_dataloader",
        "normalize",
        "stack_records",
        "to_device",
    }


def test_public_names_live_where_the_layout_says():
    # Each name comes from its module; the integrations need their framework.
    import importlib

    homes = {
        "Loader": "looptoolkit.loader",
        "Mix": "looptoolkit.mix",
        "LoaderStats": "looptoolkit.loader",
        "Order": "looptoolkit.order",
        "Ragged": "looptoolkit.ragged._column",
        "Padded": "looptoolkit.ragged._layouts",
        "PadLayout": "looptoolkit.ragged._layout_options",
        "FlatLayout": "looptoolkit.ragged._layout_options",
        "PackLayout": "looptoolkit.ragged._layout_options",
        "FitLayout": "looptoolkit.ragged._layout_options",
        "StaticBatches": "looptoolkit._static",
        "to_device": "looptoolkit.device",
        "TransferError": "looptoolkit._common.errors",
        "ContainerRebuildWarning": "looptoolkit.tree",
        "RepeatedEpochWarning": "looptoolkit._common.errors",
        "BatchKeys": "looptoolkit._common.keys",
        "group_size_for": "looptoolkit._inputs.group_budget",
    }
    for name, module in homes.items():
        assert getattr(looptoolkit, name) is getattr(importlib.import_module(module), name)


def test_public_errors_are_shown_under_looptoolkit():
    import pickle
    import traceback

    errors = [
        value
        for value in vars(looptoolkit).values()
        if isinstance(value, type) and issubclass(value, BaseException)
    ]
    assert {e.__name__ for e in errors} == {
        "TransferError",
        "ContainerRebuildWarning",
        "RepeatedEpochWarning",
    }
    for error in errors:
        assert error.__module__ == "looptoolkit", error
        shown = "".join(traceback.format_exception_only(error("boom")))
        assert shown.startswith(f"looptoolkit.{error.__name__}: boom"), shown
        # pickling finds the class under its shown name
        assert type(pickle.loads(pickle.dumps(error("boom")))) is error


def test_unknown_attribute_raises():
    import pytest

    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        looptoolkit.Nope  # noqa: B018


@pytest.mark.parametrize(
    ("module", "needs"),
    [
        ("looptoolkit", None),
        ("looptoolkit.torch_data", "torch"),
        ("looptoolkit.tf_data", "tensorflow"),
        ("looptoolkit.distributed", None),
    ],
)
def test_every_public_name_has_a_docstring_with_examples(module, needs):
    import importlib
    import inspect

    if needs is not None:
        pytest.importorskip(needs)
    mod = importlib.import_module(module)
    lacking = [
        name
        for name in mod.__all__
        if not name.startswith("__")
        and "Examples:" not in (inspect.getdoc(getattr(mod, name)) or "")
    ]
    assert lacking == []
