"""The README's tour runs as written."""

import pathlib
import re

from readme_tour import tour

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_readme_starts_with_the_two_commands():
    text = (ROOT / "README.md").read_text()
    first_block = re.search(r"```sh\n(.*?)```", text, re.S).group(1)
    assert first_block.splitlines()[0].startswith("make compare")
    assert first_block.splitlines()[1].startswith("make test")


def test_readme_tour_runs():
    namespace: dict = {}
    exec(compile(tour(ROOT / "README.md"), "README.md", "exec"), namespace)
    batch = namespace["batch"]
    assert batch["im"]["image"].dtype.name == "float16"
    assert batch["id"] == "a"
    loader = namespace["loader"]
    assert loader.state_dict()["epoch"] == 0


def test_install_routes_name_this_version_and_the_python_floor():
    import tomllib

    import looptoolkit

    text = (ROOT / "README.md").read_text()
    floor = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert floor.startswith(">=")
    assert f"Python {floor.removeprefix('>=')} or newer" in text
    assert "not on the package index" in text
    # the routes that work: a clone (torch's CPU build first) and the wheel `make dist` builds
    assert "--index-url https://download.pytorch.org/whl/cpu" in text
    assert 'pip install -c constraints.txt ".[torch]"' in text
    wheel = f"dist/looptoolkit-{looptoolkit.__version__}-py3-none-any.whl"
    assert text.count(wheel) >= 2 and "make dist" in text
    assert 'pip install "looptoolkit[torch]"' not in text  # the index has no such package
