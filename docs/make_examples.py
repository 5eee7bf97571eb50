"""Regenerate the manual's example outputs from the current code: `make docs-examples`.

Each example sits between `<!-- example: NAME -->` and `<!-- /example -->` on a page of docs/;
this script runs the page's own commands in a fresh launch dir, puts what they printed in
place of the old block, and writes the sentence that reads it from the same figures, so the
prose cannot claim what the output does not show. Nothing else on the page changes.

Each example is two steps: a maker runs the commands and picks the lines shown (`MAKERS`), a
renderer turns those lines into the block (`RENDER`). tests/unit/test_doc_examples.py renders
each page's shown lines again with the current renderer and compares the block, so a hand edit
of a block, or a reading that no longer follows from its lines, fails there.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PAGES = sorted((REPO / "docs").glob("*.md"))
BLOCK = re.compile(r"(<!-- example: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /example -->)", re.S)
SWEEP = ["-m", "boost=dim_reduce", "boost.rho=0.4,0.55,0.7", "boost.sigma=0.2,0.4"]


def train(launch: Path, *args: str) -> str:
    """`python train.py ARGS` in `launch` as a user runs it; its stderr (where sporeflow reports)."""
    env = {**os.environ, "MLFLOW_TRACKING_URI": ""}
    env.pop("ONEDNN_MAX_CPU_ISA", None)
    proc = subprocess.run(
        [sys.executable, str(REPO / "train.py"), *args, "callbacks.progress_bar=false"],
        cwd=launch,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        sys.exit(f"python train.py {' '.join(args)} failed:\n{proc.stderr[-3000:]}")
    return proc.stderr


_DEFAULT_JOB: dict[str, str] = {}  # the default dim-reduce job's stderr, run once for its examples


def default_job(launch: Path) -> str:
    """`python train.py boost=dim_reduce`'s stderr (run once for every example that shows it)."""
    if "err" not in _DEFAULT_JOB:
        _DEFAULT_JOB["err"] = train(launch, "boost=dim_reduce")
    return _DEFAULT_JOB["err"]


def indented(shown: list[str]) -> str:
    """Lines as a page's indented code block (a blank line stays blank)."""
    return "\n".join(("    " + ln).rstrip() for ln in shown)


def shown_lines(body: str) -> list[str]:
    """An example block's code lines as the maker picked them: the indented block at its start
    (the reverse of `indented`)."""
    lines = []
    for ln in body.splitlines():
        if ln.startswith("    ") or (not ln.strip() and lines):
            lines.append(ln[4:])
        else:
            break
    while lines and not lines[-1].strip():
        lines.pop()
    return lines


def train_line(launch: Path) -> list[str]:
    """`python train.py`'s summary line, the parts that are the reader's own (the run dir, the
    store's path, the run's id) elided."""
    err = train(launch)
    line = next(ln.strip() for ln in err.splitlines() if ln.startswith("[sporeflow] train: "))
    line = re.sub(r"weights \S+/(\w+\.\w+);", r"weights outputs/.../\1;", line)
    line = re.sub(r"sqlite:///\S+/mlflow\.db", "sqlite:///.../mlflow.db", line)
    return [re.sub(r", run ([0-9a-f]{4})[0-9a-f]+$", r", run \1...", line)]


def render_train_line(shown: list[str]) -> str:
    """The default job's summary line and what it says."""
    (line,) = shown
    match = re.match(
        r"\[sporeflow\] train: val acc=([\d.]+), val loss=([\d.]+), "
        r"test acc=([\d.]+), test loss=([\d.]+), (\d+) images/s",
        line,
    )
    updates = re.search(r"\((batch \d+), (\d+) optimizer updates\)", line)
    assert match and updates, line
    return (
        f"{indented(shown)}\n\n(from `python train.py` with this code: after {updates[2]} "
        f"optimizer updates of {updates[1]}, the validation split's accuracy {match[1]} and loss "
        f"{match[2]} - what its choices read - and the test split's accuracy {match[3]} and loss "
        f"{match[4]}, measured once at the end - what it reports; images/s is this machine's.)\n"
    )


def cost_lines(launch: Path) -> list[str]:
    """The default dim-reduce job's verdict at equal cost and its cost table."""
    lines = default_job(launch).splitlines()
    verdict = next(ln.strip() for ln in lines if ln.strip().startswith("at equal cost ("))
    start = next(
        i for i, ln in enumerate(lines) if ln.strip().startswith("cost ") and "passes" in ln
    )
    table = [lines[start]]
    for ln in lines[start + 1 :]:
        if len(ln.split()) != 7 or not ln.startswith("  "):
            break
        table.append(ln)
    return [ln.strip() for ln in [verdict, *table]]


def render_cost_lines(shown: list[str]) -> str:
    """The verdict at equal cost and the cost table, and what they say."""
    verdict, *table = shown
    passes = {r.split()[0]: float(r.split()[1]) for r in table[1:]}
    ratio = re.search(r"\(([\d.]+)x the passes of (\d+) plain epochs?: (\d+) steps\)", verdict)
    assert ratio and "stage2" in passes and "budget" in passes, verdict
    significant = "not significant" not in verdict
    return (
        f"{indented(shown)}\n\n(from `python train.py boost=dim_reduce` with this code: stage 2 spent "
        f"{passes['stage2']:.0f} passes with its snapshots and PCA, {ratio[1]}x what "
        f"{ratio[2]} plain epoch{'s' if ratio[2] != '1' else ''} cost; the budget arm trained "
        f"{ratio[3]} steps for it, and at equal cost the difference "
        f"{'is' if significant else 'is not'} significant at 5%. The snapshots and the PCA count "
        "by the rule above, not by their seconds: the same stage 1 and settings give these "
        "passes and steps on any machine at any load; only the seconds columns move).\n"
    )


def gain_line(launch: Path) -> list[str]:
    """The default dim-reduce job's line against its best baseline."""
    err = default_job(launch)
    best = re.search(r"gain \(stage2 - (?P<name>\w+),", err)
    assert best, err[-2000:]
    lines = [ln.strip() for ln in err.splitlines() if ln.strip().startswith("stage2 vs ")]
    against = [ln for ln in lines if ln.startswith(f"stage2 vs {best['name']}:")]
    assert against, err[-2000:]
    return [against[0]]  # on the test images: the console shows them first


def render_gain_line(shown: list[str]) -> str:
    """The line against the best baseline, and what it says."""
    (line,) = shown
    verdict = "is" if "not significant" not in line else "is not"
    return (
        f"{indented(shown)}\n\n"
        f"(from `python train.py boost=dim_reduce` with this code: the gain over that baseline "
        f"{verdict} significant at 5%).\n"
    )


def sweep_table(launch: Path) -> list[str]:
    """The 6-job rho x sigma sweep's table, best first, and its decision."""
    err = train(launch, *SWEEP)
    lines = err.splitlines()
    start = next(
        i for i, ln in enumerate(lines) if ln.lstrip().startswith("job ") and "status" in ln
    )
    table = [lines[start]]
    for ln in lines[start + 1 :]:
        if not re.match(r"\s+\d+\s", ln):
            break
        table.append(ln)
    decided = [
        ln.strip()
        for ln in lines
        if ln.startswith(("winner: ", "tie: ", "leading: ", "best: ", "leader: "))
    ]
    return [ln.rstrip() for ln in [*table, "", *decided]]


def render_sweep_table(shown: list[str]) -> str:
    """The sweep's table and decision, and the sentence that reads them."""
    blank = shown.index("")
    table, decided = shown[:blank], shown[blank + 1 :]
    rows = [r.split() for r in table[1:]]
    header = table[0].split()
    p_col, ci_col = header.index("p"), header.index("CI")
    # the CI column's header is three words ("test gain 95% CI"); in the rows it is one field
    ci_field, p_field = ci_col - 3, p_col - 3
    straddle = [r for r in rows if _straddles(r[ci_field])]
    significant = [r for r in rows if float(r[p_field]) < 0.05]
    verdict = "a tie" if decided and decided[0].startswith("tie: ") else "a winner"
    leader = next((ln for ln in decided if ln.startswith("leader: ")), None)
    first = (
        "no point leads (nothing registered)"
        if leader is None or leader.startswith("leader: none")
        else f"job {rows[0][0]}, listed first, is the leader ({leader.split('(', 1)[1].rstrip(')')})"
    )
    reading = (
        f"Read it as: {first}; "
        f"{len(straddle)} of {len(rows)} test gain intervals straddle zero"
        + (
            "; none of the settings differs significantly from its best baseline at 5%"
            if not significant
            else "; significant at 5%: " + ", ".join(f"job {r[0]}" for r in significant)
        )
        + ". The sweep's own decision, from stage 2's per-image outcomes on the validation "
        + f"images of every point, is {verdict}"
        + (f" ({_tie_count(decided[0], len(rows))})" if verdict == "a tie" else "")
        + (": more validation images or seeds may decide." if verdict == "a tie" else ".")
    )
    return indented(shown) + "\n\n" + reading + "\n"


def _straddles(ci: str) -> bool:
    low, high = (float(x) for x in re.findall(r"[-+]\d+\.\d+", ci))
    return low <= 0.0 <= high


def tied_points(decision: str) -> list[str]:
    """The points a `tie:` line names as not told apart from the best."""
    named = decision.split(" cannot be told apart from ", 1)[-1].rsplit(" at 5% ", 1)[0]
    return re.findall(r"(\S.*?) \([\d.]+\)(?:, |$)", named)


def _tie_count(decision: str, points: int, labels: list[str] | None = None) -> str:
    """How many of the other points the tie names, and which (or how many) were shown worse:
    `labels`, every point's, names them."""
    tied, others = tied_points(decision), points - 1
    best = re.match(r"tie: (.+?) \(", decision)
    worse = others - len(tied)
    unnamed = [p for p in labels or [] if p not in tied and best and p != best[1]]
    said = ", ".join(unnamed) if labels and len(unnamed) == worse else str(worse)
    return f"the best ties {len(tied)} of the {others} other points" + (
        f"; {said} {'is' if worse == 1 else 'are'} shown worse at 5% and not named" if worse else ""
    )


def race(launch: Path) -> list[str]:
    """The default job's rho x sigma grid raced over seeds: a line per round, the race's end
    and the sweep's decision."""
    err = train(launch, "-m", "hparams_search=dim_reduce_race")
    lines = [ln.strip() for ln in err.splitlines()]
    shown = [ln for ln in lines if ln.startswith("[sporeflow] race")]
    decided = [ln for ln in lines if ln.startswith(("winner: ", "tie: "))]
    assert shown and decided, err[-2000:]
    return [*shown, "", *decided]


def render_race(lines: list[str]) -> str:
    """The race's lines and its decision as printed, and the sentence that reads them."""
    blank = lines.index("")
    return race_block(lines[:blank], lines[blank + 1 :])


def race_block(shown: list[str], decided: list[str]) -> str:
    """The race's lines and its decision as printed, and the sentence that reads them."""
    ran = sum(int(m[1]) for ln in shown if (m := re.search(r"\): (\d+) points", ln)))
    points = int(re.search(r"race of (\d+) points", shown[0])[1])
    dropped = [m[1] for ln in shown if (m := re.search(r"dropped: (.+)$", ln)) and m[1] != "none"]
    verdict = "a tie" if decided[0].startswith("tie: ") else "a winner"
    gone = [p.strip() for d in dropped for p in d.split(",") if "=" in p]
    left = re.search(r"left after \d+ rounds?: (.+)$", shown[-1])
    labels = [*(left[1].split(", ") if left else []), *gone]
    still_tied = [p for p in gone if p in tied_points(decided[0])]
    reading = (
        f"Read it as: the race trained {ran} stage-2 jobs where the grid over the same seeds "
        f"trains {points * len(shown[1:-1])}; "
        + (f"it dropped {'; '.join(dropped)}" if dropped else "it dropped no setting")
        + f". The sweep's own decision over what the race ran is {verdict}"
        + (f" ({_tie_count(decided[0], points, labels)})" if verdict == "a tie" else "")
        + (
            f", and {len(still_tied)} of the {len(gone)} dropped settings are among the tied: "
            "the race's rank test over seeds drops on weaker evidence than the decision's "
            "per-image, Holm-corrected test needs to call a setting worse."
            if still_tied
            else "."
        )
    )
    return indented([*shown, "", *decided]) + "\n\n" + reading + "\n"


MAKERS = {
    "train-line": train_line,
    "gain-line": gain_line,
    "cost-lines": cost_lines,
    "sweep-table": sweep_table,
    "race": race,
}
RENDER = {
    "train-line": render_train_line,
    "gain-line": render_gain_line,
    "cost-lines": render_cost_lines,
    "sweep-table": render_sweep_table,
    "race": render_race,
}


def examples() -> dict[str, Path]:
    """Each example's name -> the page that holds it."""
    return {m.group("name"): page for page in PAGES for m in BLOCK.finditer(page.read_text())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", default=sorted(MAKERS), help="examples to regenerate")
    parser.add_argument(
        "--render",
        action="store_true",
        help="run nothing: render each block again from its own lines (after a reading changed)",
    )
    args = parser.parse_args(argv)
    found = examples()
    for name in args.names:
        if name not in MAKERS or name not in found:
            sys.exit(
                f"no example {name!r}: docs/ marks {sorted(found)}; this script makes {sorted(MAKERS)}"
            )
        page = found[name]
        if args.render:
            old = next(m["body"] for m in BLOCK.finditer(page.read_text()) if m["name"] == name)
            body = RENDER[name](shown_lines(old))
        else:
            with tempfile.TemporaryDirectory() as launch:
                body = RENDER[name](MAKERS[name](Path(launch)))
        text = BLOCK.sub(
            lambda m, name=name, body=body: (
                m.group(1) + body + m.group(4) if m.group("name") == name else m.group(0)
            ),
            page.read_text(),
        )
        page.write_text(text)
        done = "rendered from its lines" if args.render else "regenerated"
        print(f"{page.relative_to(REPO)}: example {name} {done}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
