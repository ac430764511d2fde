import looptoolkit


def test_all_is_sorted_and_exported():
    assert looptoolkit.__all__ == sorted(looptoolkit.__all__)
    for name in looptoolkit.__all__:
        assert getattr(looptoolkit, name) is not None
    assert set(dir(looptoolkit)) == set(looptoolkit.__all__)


def test_public_names():
    assert set(looptoolkit.__all__) == {
        "ContainerRebuildWarning",
        "GetItemsDataset",
        "Loader",
        "TransferError",
        "__version__",
        "to_device",
    }


def test_unknown_attribute_raises():
    import pytest

    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        looptoolkit.Nope  # noqa: B018
