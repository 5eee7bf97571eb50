"""mkdocs hooks (mkdocs.yml `hooks:`): the generated option reference and the root files.

- `<!-- reference: schema -->` / `<!-- reference: groups -->` on a page become the tables that
  sporeflow.config.reference generates from the schema and from conf/ at every build;
  `<!-- reference: optuna-sweeper -->` / `<!-- reference: race-sweeper -->` the tables of the
  Optuna and race sweepers' settings;
- `<!-- include: NAME -->` becomes the repository's NAME (CHANGELOG.md, CONTRIBUTING.md,
  BENCHMARKS.md), so that those files stay where a repository keeps them and are pages too.
"""

from __future__ import annotations

import re
from pathlib import Path

from hydra_plugins.sporeflow_optuna_sweeper.optuna_sweeper import SporeflowOptunaSweeperConf
from hydra_plugins.sporeflow_race_sweeper.race_sweeper import SporeflowRaceSweeperConf
from sporeflow.config.reference import groups_markdown, schema_markdown

REPO = Path(__file__).resolve().parents[1]
INCLUDE = re.compile(r"<!-- include: (?P<name>[\w.-]+) -->")
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


def on_page_markdown(markdown: str, **_) -> str:
    markdown = INCLUDE.sub(_include, markdown)
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
