"""No pointer leads nowhere: every file, test, heading anchor, README section and
`create_pipeline` parameter that the docs, the code and its messages name exists."""

import glob
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# What points: the docs, the code and its messages, the build.
SOURCES = ("README.md", "docs/*.md", "pipeline/**/*.py", "components/**/*.py", "benchmarks/*.py", "tests/**/*.py",
           "scripts/*", "Makefile", "Dockerfile", "setup.py")
# A path in this repository, optionally `::test` or `#anchor` after it.
PATH = re.compile(r"(?<![\w/.-])((?:pipeline|components|benchmarks|tests|scripts|docs|locks)/[\w./-]*\w)"
                  r"(?:(::)(\w+)|#([\w-]+))?")
# "README, Section" or README, "Section": a README section named in prose.
README_SECTION = re.compile(r"README, \"?([A-Z][\w -]*?)\"?[),.]")
# `create_pipeline(name=...`: a parameter named in prose.
PARAMETER = re.compile(r"create_pipeline\(((?:\w+=\.\.\.,? ?)+)\)")
# Paths that name what a command writes, not files of the repository.
WRITTEN = {"docs/skew.json"}
# Tests whose texts name files that do not exist on purpose.
EXAMPLES = {"tests/test_layout.py", "tests/test_pointers.py"}


def _sources():
    for pattern in SOURCES:
        for path in sorted(glob.glob(os.path.join(ROOT, pattern), recursive=True)):
            if os.path.isfile(path) and "__pycache__" not in path and not path.endswith(".pyc"):
                yield os.path.relpath(path, ROOT)


def _read(relative: str) -> str:
    with open(os.path.join(ROOT, relative), errors="replace") as handle:
        return handle.read()


def anchors(markdown: str) -> set:
    """The anchors GitHub gives a Markdown file's headings."""
    found = set()
    for heading in re.findall(r"^#+ (.+)$", markdown, flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        found.add(slug)
    return found


def dead_pointers(sources=None) -> list:
    """(file, pointer, what is wrong) for every pointer that leads nowhere."""
    dead = []
    readme_sections = {h.strip() for h in re.findall(r"^#+ (.+)$", _read("README.md"), flags=re.M)}
    signature = re.search(r"^def create_pipeline\((.*?)\) ->", _read("pipeline/pipeline.py"), flags=re.M | re.S)
    parameters = set(re.findall(r"^\s+(\w+):", signature.group(1), flags=re.M))
    for source in sources or (s for s in _sources() if s not in EXAMPLES):
        text = _read(source)
        for match in PATH.finditer(text):
            path, test, anchor = match.group(1).rstrip("."), match.group(3), match.group(4)
            if path in WRITTEN or text[match.end():match.end() + 1] == "*":  # a pattern, not a file
                continue
            full = os.path.join(ROOT, path)
            if not os.path.exists(full):
                dead.append((source, path, "no such file"))
            elif test and not re.search(rf"^(?:async )?def {test}\(|^class {test}\b", _read(path), flags=re.M):
                dead.append((source, f"{path}::{test}", "no such test"))
            elif anchor and path.endswith(".md") and anchor not in anchors(_read(path)):
                dead.append((source, f"{path}#{anchor}", "no such heading"))
        for section in README_SECTION.findall(text):
            if section not in readme_sections:
                dead.append((source, f"README, {section}", "no such README section"))
        for named in PARAMETER.findall(text):
            dead.extend((source, f"create_pipeline({name}=)", "no such parameter")
                        for name in re.findall(r"(\w+)=", named) if name not in parameters)
    return dead


def test_every_file_test_heading_and_section_named_exists():
    dead = dead_pointers()
    assert not dead, "\n".join(f"{source}: {pointer} ({why})" for source, pointer, why in dead)


@pytest.mark.parametrize("text, wrong", [
    ("see docs/no-such-page.md", "docs/no-such-page.md"),
    ("see README.md and docs/operations.md#no-such-heading", "docs/operations.md#no-such-heading"),
    ("tests/test_layout.py::test_that_is_not_there", "tests/test_layout.py::test_that_is_not_there"),
    ("(see README, At scale)", "README, At scale"),
    ("`create_pipeline(train_config=..., settings=...)`", "create_pipeline(train_config=)"),
])
def test_the_check_finds_a_pointer_that_leads_nowhere(tmp_path, text, wrong):
    probe = tmp_path / "probe.md"
    probe.write_text(text + "\n")
    found = dead_pointers([str(probe)])
    assert [pointer for _, pointer, _ in found] == [wrong]


def test_the_check_passes_pointers_that_exist(tmp_path):
    probe = tmp_path / "probe.md"
    probe.write_text("docs/operations.md#when-a-command-fails, tests/test_layout.py::"
                     "test_imports_flow_one_way_between_concerns and README, \"Exit status\".\n")
    assert dead_pointers([str(probe)]) == []
