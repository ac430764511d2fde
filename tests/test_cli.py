import json
import subprocess
import sys

import pytest

import looptoolkit
from looptoolkit import cli
from looptoolkit.adapters import BACKENDS


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


def test_no_command_lists_the_commands_and_version_prints(capsys):
    assert cli.main([]) == 0
    out = capsys.readouterr().out
    for command in cli.COMMANDS:
        assert f"    {command} " in out
    with pytest.raises(SystemExit) as info:
        cli.main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"looptoolkit {looptoolkit.__version__}"


def test_env_lists_every_registered_backend(capsys):
    assert cli.main(["env", "--json"]) == 0
    assert list(json.loads(capsys.readouterr().out)["backends"]) == list(BACKENDS)


def test_unknown_command_exits_with_usage_error(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["nope"])
    assert info.value.code == 2


def test_the_version_lives_in_one_place_and_the_changelog_names_it():
    import re
    from importlib.metadata import version
    from pathlib import Path

    changelog = (Path(__file__).resolve().parents[1] / "CHANGELOG.md").read_text()
    assert "## [Unreleased]" in changelog
    released = re.findall(r"^## \[(\d+\.\d+\.\d+)\]", changelog, re.MULTILINE)
    assert released and released[0] == looptoolkit.__version__ == version("looptoolkit")
