"""What a new user reads first holds up: the README's table lists each page once, its
first Python example says which interpreter has its packages, and the documented Go build
writes its binary where git ignores it."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def test_the_readme_table_lists_each_page_once() -> None:
    links = re.findall(r"^\|[^|]*\| \[[^]]*\]\(([^)]+)\) \|$", README.read_text(), re.M)
    assert links, "the README has no table of pages"
    assert sorted(links) == sorted(set(links)), "a page is listed twice"


def test_the_first_python_example_says_to_run_it_with_the_project_s_interpreter() -> None:
    text = README.read_text()
    before_example = text[: text.index("```python")]
    section = before_example[before_example.rindex("\n## ") :]
    # The system's python3 has neither grpc nor memoryd: "No module named 'grpc'".
    assert ".venv/bin/python" in section
    assert "source .venv/bin/activate" in section


def _documented_go_builds() -> list[tuple[Path, str]]:
    builds = []
    for doc in [README, *ROOT.glob("docs/*.md"), *ROOT.glob("clients/*/README.md")]:
        for line in doc.read_text().splitlines():
            if " go build " in f" {line} ":
                words = shlex.split(line, comments=True)
                builds.append((doc, words[words.index("-o") + 1]))
    return builds


def test_the_documented_go_build_leaves_its_binary_where_git_ignores_it() -> None:
    builds = _documented_go_builds()
    assert builds, "no documented go build found"
    for doc, output in builds:
        ignored = subprocess.run(
            ["git", "check-ignore", "--no-index", "-q", output], cwd=ROOT, check=False
        )
        assert ignored.returncode == 0, f"{doc.name}: `go build -o {output}` is not ignored"
