"""Exit codes: declared once (`ExitCode`), and README's table says the same; what a run report says of its push."""

import re
from typing import List

from pipeline.outcome import ExitCode, Outcome, RunReport
from tests.helpers import REPO_ROOT


def exit_table(markdown: str) -> List[int]:
    """The exit statuses of the table under a Markdown text's "Exit status" heading, in order."""
    section = re.search(r"^## Exit status$(.*?)(?=^## |\Z)", markdown, flags=re.M | re.S)
    return [int(code) for code in re.findall(r"^\| (\d+) \|", section.group(1), flags=re.M)] if section else []


def test_readme_lists_every_exit_code_and_no_other():
    assert exit_table((REPO_ROOT / "README.md").read_text()) == [int(code) for code in ExitCode]


def test_the_table_check_sees_a_code_the_enum_lacks():
    text = "## Exit status\n\n| exit | when |\n|---|---|\n| 0 | fine |\n| 7 | new |\n\n## Read more\n| 9 | no |\n"
    assert exit_table(text) == [0, 7] != [int(code) for code in ExitCode]



def test_the_pushed_version_is_the_version_folders_name_wherever_it_is():
    assert RunReport(Outcome.PUSHED, pushed_version_dir="/srv/serving/big_tip/179606").pushed_version == "179606"
    assert RunReport(Outcome.PUSHED, pushed_version_dir="gs://b/serving/big_tip/17/").pushed_version == "17"
    assert RunReport(Outcome.NOT_BLESSED).pushed_version is None
    assert RunReport(Outcome.NOT_BLESSED, pushed_version_dir="").pushed_version is None
