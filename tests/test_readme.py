"""The README's tour runs as written."""

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_readme_starts_with_the_two_commands():
    text = (ROOT / "README.md").read_text()
    first_block = re.search(r"```sh\n(.*?)```", text, re.S).group(1)
    assert first_block.splitlines()[0].startswith("make compare")
    assert first_block.splitlines()[1].startswith("make test")


def test_readme_tour_runs():
    text = (ROOT / "README.md").read_text()
    tour = re.findall(r"```python\n(.*?)```", text, re.S)[0]
    namespace: dict = {}
    exec(compile(tour, "README.md", "exec"), namespace)
    batch = namespace["batch"]
    assert batch["im"]["image"].dtype.name == "float16"
    assert batch["id"] == "a"
    loader = namespace["loader"]
    assert loader.state_dict()["epoch"] == 0
