"""README and docs stay current: every relative link resolves, the bench's time agrees with its budget in its page and
the Makefile, and ``golden --arch`` without facts stops at once (exit 2) naming the missing file.

README is a user's guide: at most ``README_MAX_LINES`` lines, linking the map of the tree (docs/structure.md) and
the measured results (``RESULTS``' README.md). The rule for figures: README states no measured figure of its own.
A figure is a number with a unit of time, rate, size or ratio (s, ms, us, min, h, %, x, GiB, ulps, ...) or a count
of cases, tests, checks, scenarios, runs, replays, graphs or launches (``FIGURE``); anywhere in README, code blocks
included, it fails the test, except in the text of a link to a page under ``RESULTS`` that states that same figure
(whitespace aside). Figures live in the results folder; README links them, never restates them.

One spelling of the harness command in README and the topic pages (docs/cli.md, generated from the parsers,
aside): ``rankcheck COMMAND``, never ``python -m harness COMMAND``, ``.venv/bin/rankcheck COMMAND`` or a bare
``harness COMMAND`` (``SPELLINGS``)."""

import re
import subprocess
import sys
from pathlib import Path

from harness.bench.budget import BUDGET_S
from hang_guard import HANG_GUARD_S

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
README_MAX_LINES = 150
# The measured results (named in parts: no Python file names that folder, tests/harness/test_structure.py).
RESULTS = ROOT / "docs" / "results"
RESULTS_PREFIX = "docs/" + "results/"
UNITS = (r"µs|us|ms|ns|s|sec|seconds?|min|minutes?|h|hours?|%|x|GiB|MiB|KiB|GB|MB|KB|GB/s|TB/s|ulps?|cases|tests|"
         r"checks|scenarios|runs|replays|graphs|launches")
# A number (a range or list of them too: 3.9-9.7x, 16.7/12.8 us) and its unit; not part of a word or a name.
FIGURE = re.compile(rf"(?<![\w.^/=-])\d+(?:[.,]\d+)*(?:\s*[-/]\s*\d+(?:[.,]\d+)*)*\s*(?:{UNITS})(?![\w/])")
SUBCOMMANDS = "list|validate|replay|flight|golden|merge-reports|record|bench|compile|fuzz|scale"
SPELLINGS = re.compile(rf"(?:python3?|\.venv/bin/python) -m harness (?:{SUBCOMMANDS})\b|"
                       rf"\.venv/bin/rankcheck (?:{SUBCOMMANDS})\b|`harness (?:{SUBCOMMANDS})\b")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
# A path in backticks under one of the project's directories (placeholders such as <arch> are not paths).
QUOTED_PATH = re.compile(r"`((?:docs|examples|golden|kernels|harness|scenarios|tests|contracts)/[A-Za-z0-9_./-]+)`")


def relative_targets(page: Path) -> list[str]:
    """The relative link targets and backticked project paths of a Markdown page (anchors and URLs left out)."""
    text = page.read_text(encoding="utf-8")
    links = [t.split("#")[0] for t in LINK.findall(text) if not re.match(r"^[a-z]+:|^#", t)]
    return links + QUOTED_PATH.findall(text)


def test_every_relative_link_of_readme_and_docs_resolves():
    broken = [f"{page.relative_to(ROOT)}: {target}" for page in PAGES for target in relative_targets(page)
              if not (page.parent / target).exists() and not (ROOT / target).exists()]
    assert broken == []


def test_the_bench_page_and_makefile_give_the_bench_budget():
    minutes = f"within {BUDGET_S / 60:.0f} minutes"
    page = " ".join((ROOT / "docs" / "bench.md").read_text(encoding="utf-8").split())
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert minutes in page and minutes in makefile
    assert not re.search(r"bench.*about \d+ minutes", makefile)


def test_golden_arch_without_facts_stops_at_once_naming_the_file(tmp_path):
    done = subprocess.run([sys.executable, "-m", "harness", "golden", "--arch", "sm_100", "--run-dir",
                           str(tmp_path / "run")], cwd=ROOT, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "golden/data/arch/sm_100.json does not exist" in done.stderr
    assert not (tmp_path / "run").exists()  # nothing ran


def unsupported_figures(text: str, results_page) -> list[str]:
    """The figures ``text`` states outside the text of a results link that states them too.

    ``results_page(target)`` is the text of a link target under the results folder (None when it does not exist)."""
    found = []

    def in_link(match: re.Match) -> str:
        label, target = match.group(1), match.group(2).split("#")[0]
        page = results_page(target[len(RESULTS_PREFIX):]) if target.startswith(RESULTS_PREFIX) else None
        stated = " ".join(page.split()) if page is not None else ""
        found.extend(f for f in (m.group(0) for m in FIGURE.finditer(label)) if " ".join(f.split()) not in stated)
        return " "
    rest = re.sub(r"\[([^\]]*)\]\(([^)\s]+)\)", in_link, text)
    return found + [m.group(0) for m in FIGURE.finditer(rest)]


def _results_page(rel: str) -> str | None:
    """The text of a page under the results folder (a folder: its README.md), None when there is none."""
    path = RESULTS / rel
    path = path / "README.md" if path.is_dir() else path
    return path.read_text(encoding="utf-8") if path.is_file() else None


def test_the_figure_rule_can_fail():
    pages = {"validate.md": "cold OK in 147 s; 138 cases"}.get
    assert unsupported_figures("make test takes about 18 min (1090 s)", pages) == ["18 min", "1090 s"]
    assert unsupported_figures("6.09x faster; LL 3.9-9.7x; 16.7/12.8 us; 133 of 133 cases; 42 in 163 s", pages) == [
        "6.09x", "3.9-9.7x", "16.7/12.8 us", "133 cases", "163 s"]
    link = f"[147 s cold]({RESULTS_PREFIX}validate.md) and [150 s]({RESULTS_PREFIX}validate.md) [9 s](docs/x.md)"
    assert unsupported_figures(link, pages) == ["150 s", "9 s"]
    names = "sm_90a, junit-10.xsd, world=2, --world 1 2, --deadline 5 # exit 1, rankcheck-validate/2, job0, 01:00:00"
    assert unsupported_figures(names, pages) == []


def test_readme_is_a_short_guide_that_states_no_figure_of_its_own():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= README_MAX_LINES, len(text.splitlines())
    assert unsupported_figures(text, _results_page) == []
    links = [t.split("#")[0] for t in LINK.findall(text)]
    assert "docs/structure.md" in links and RESULTS_PREFIX + "README.md" in links


def test_one_spelling_of_the_command():
    found = {str(p.relative_to(ROOT)): SPELLINGS.findall(p.read_text(encoding="utf-8")) for p in PAGES
             if p.name != "cli.md"}
    assert {page: hits for page, hits in found.items() if hits} == {}
