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
