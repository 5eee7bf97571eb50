"""mkdocs hooks (mkdocs.yml `hooks:`): the generated option reference and the root files.

- `<!-- reference: schema -->` / `<!-- reference: groups -->` on a page become the tables that
  sporeflow.config.reference generates from the schema and from conf/ at every build;
  `<!-- reference: optuna-sweeper -->` / `<!-- reference: race-sweeper -->` the tables of the
  Optuna and race sweepers' settings;
- `<!-- include: NAME -->` becomes the repository's NAME (CHANGELOG.md, CONTRIBUTING.md,
  BENCHMARKS.md), so that those files stay where a repository keeps them and are pages too;
- `<!-- notebook: NAME.ipynb -->` becomes that notebook of docs/ as the test suite last ran
  it (tests/e2e/test_notebook.py writes its outputs): its text, code, printed output, values
  (a DataFrame as its HTML table) and figures; the console lines a run prints (stderr) are
  left out;
- `<!-- raw -->` ... `<!-- /raw -->` holds what a reader of the page's raw markdown (on GitHub,
  in an editor) needs and the site does not: where the generated part of the page is read. The
  site drops it; a raw reader sees it (the markers are HTML comments there).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from hydra_plugins.sporeflow_optuna_sweeper.optuna_sweeper import SporeflowOptunaSweeperConf
from hydra_plugins.sporeflow_race_sweeper.race_sweeper import SporeflowRaceSweeperConf
from sporeflow.config.reference import groups_markdown, schema_markdown

REPO = Path(__file__).resolve().parents[1]
INCLUDE = re.compile(r"<!-- include: (?P<name>[\w.-]+) -->")
NOTEBOOK = re.compile(r"<!-- notebook: (?P<name>[\w.-]+\.ipynb) -->")
RAW_ONLY = re.compile(r"<!-- raw -->\n.*?<!-- /raw -->\n", re.S)
LOG_LINE = re.compile(r"\[\d{4}-\d\d-\d\d [\d:,]+\]\[")  # Hydra's log lines: a run's console
# links inside the included root files, rewritten to where their targets are on the site
ROOT_LINKS = {
    "docs/": "",
    "CONTRIBUTING.md": "contributing.md",
    "BENCHMARKS.md": "benchmarks.md",
    "CHANGELOG.md": "changelog.md",
    "README.md": "index.md",
}


def _include(match: re.Match) -> str:
    text = (REPO / match["name"]).read_text()
    for target, page in ROOT_LINKS.items():
        text = text.replace(f"]({target}", f"]({page}")
    return text


def _fenced(text: str, language: str = "") -> str:
    return f"```{language}\n{text.rstrip()}\n```"


def _output(output: dict) -> str | None:
    """One cell output as markdown: printed text, a value (HTML where it has some), a figure."""
    if output["output_type"] == "stream":
        lines = "".join(output["text"]).splitlines(keepends=True)
        text = "".join(line for line in lines if not LOG_LINE.match(line))
        return _fenced(text, "text") if output["name"] == "stdout" and text.strip() else None
    data = output.get("data", {})
    if "image/png" in data:
        png = "".join(data["image/png"]).strip()
        return f'<img alt="a figure of the notebook" src="data:image/png;base64,{png}">'
    if "text/html" in data:
        return "".join(data["text/html"])
    if "text/plain" in data:
        return _fenced("".join(data["text/plain"]), "text")
    return None


def notebook_markdown(path: Path) -> str:
    """A notebook (nbformat 4 JSON) as markdown: its cells in order, each code cell followed
    by what it showed."""
    parts = []
    for cell in json.loads(path.read_text())["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            parts.append(source)
        elif cell["cell_type"] == "code":
            parts.append(_fenced(source, "python"))
            parts += [shown for shown in map(_output, cell.get("outputs", [])) if shown]
    return "\n\n".join(parts) + "\n"


def on_page_markdown(markdown: str, **_) -> str:
    markdown = RAW_ONLY.sub("", markdown)
    markdown = INCLUDE.sub(_include, markdown)
    markdown = NOTEBOOK.sub(lambda m: notebook_markdown(REPO / "docs" / m["name"]), markdown)
    markdown = markdown.replace("<!-- reference: schema -->", schema_markdown())
    for marker, conf in (
        ("optuna", SporeflowOptunaSweeperConf),
        ("race", SporeflowRaceSweeperConf),
    ):
        markdown = markdown.replace(
            f"<!-- reference: {marker}-sweeper -->",
            schema_markdown(conf, "hydra.sweeper", depth="####"),
        )
    return markdown.replace("<!-- reference: groups -->", groups_markdown(REPO / "conf"))
