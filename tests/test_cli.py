import json
import subprocess
import sys

from looptoolkit import cli


def test_env_reports_installed_backends(capsys):
    assert cli.main(["env", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["backends"]["numpy"]["installed"] is True
    assert info["backends"]["numpy"]["devices"] == ["cpu"]
    for name in ("torch", "jax", "tf"):
        entry = info["backends"][name]
        assert entry["installed"] is True or entry["install"].startswith("pip install")
        if entry["installed"]:
            assert entry["version"]
            assert entry["devices"]
    torch = info["backends"]["torch"]
    if torch["installed"]:
        assert isinstance(torch["pinned_memory"], bool)
    assert "libjpeg_turbo" in info["pillow"] or info["pillow"]["installed"] is False


def test_env_text_output_via_console_script():
    out = subprocess.run(
        [sys.executable, "-m", "looptoolkit.cli", "env"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    assert "numpy" in out and "optree" in out and "pillow" in out


def test_unknown_command_exits_with_usage_error(capsys):
    import pytest

    with pytest.raises(SystemExit) as info:
        cli.main(["nope"])
    assert info.value.code == 2
