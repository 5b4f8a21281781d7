"""README and docs stay current: every relative link resolves, the bench's time agrees with its budget in README and
the Makefile, and ``golden --arch`` without facts stops at once (exit 2) naming the missing file."""

import re
import subprocess
import sys
from pathlib import Path

from harness.bench.budget import BUDGET_S
from hang_guard import HANG_GUARD_S

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
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


def test_readme_and_makefile_give_the_bench_budget():
    minutes = f"within {BUDGET_S / 60:.0f} minutes"
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert minutes in readme and minutes in makefile
    assert not re.search(r"bench.*about \d+ minutes", makefile)


def test_golden_arch_without_facts_stops_at_once_naming_the_file(tmp_path):
    done = subprocess.run([sys.executable, "-m", "harness", "golden", "--arch", "sm_100", "--run-dir",
                           str(tmp_path / "run")], cwd=ROOT, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "golden/data/arch/sm_100.json does not exist" in done.stderr
    assert not (tmp_path / "run").exists()  # nothing ran
