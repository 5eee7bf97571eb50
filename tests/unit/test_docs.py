"""The manual says what the code does: every schema field has a meaning and the generated
reference lists it with the schema's own type, default and range; every config group option
is in the group table; every `python train.py ...` command on a page composes (as `--cfg job`
would, nothing trained) and validates, and every `sporeflow ...` command parses."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, RangeSweep
from omegaconf import OmegaConf

from helpers.train import CONF, REPO
from sporeflow.config import reference
from sporeflow.config.schema import EVAL_KEYS, RunConfig
from sporeflow.config.validation import validate
from sporeflow.entry.cli import parser
from sporeflow.entry.python_api import compose

PAGES = sorted((REPO / "docs").glob("*.md")) + [REPO / "README.md"]
# what a documented command writes for "put yours here", and what the test puts there
PLACEHOLDER = re.compile(r"<[^<>]+>")
OPTIONAL = re.compile(r"(?<!=)\[([^\[\]]*)\]")  # key=[a,b] is a Hydra list, not optional


def documented_commands(text: str) -> list[str]:
    """The `python train.py` / `python eval.py` / `sporeflow` commands in a page's code blocks (fenced or
    indented), continuation lines joined, comments and `&&` chains split off."""
    found, fence = [], False
    for line in text.replace("\\\n", " ").splitlines():
        stripped = line.strip()
        if stripped.startswith("```"):
            fence = not fence
            continue
        if not (fence or line.startswith("    ")):
            continue
        for part in re.split(r"\s+#\s", stripped)[0].split("&&"):
            part = part.strip()
            if (
                part.startswith(("python train.py", "python eval.py", "sporeflow "))
                or part == "sporeflow"
            ):
                found.append(part)
    return found


def concrete(command: str, tmp: Path) -> list[list[str]]:
    """A usage line as argument lists a shell would pass: each `[optional part]` both left
    out and put in, `<placeholder>` a real path, `...` dropped."""
    variants = [OPTIONAL.sub("", command), OPTIONAL.sub(r"\1", command)]
    out = []
    for variant in dict.fromkeys(variants):
        host = re.sub(r"://" + PLACEHOLDER.pattern, "://localhost", variant)  # a URL's host
        text = PLACEHOLDER.sub(str(tmp), host)
        # `a|b` inside a usage line offers alternatives: the first one
        text = re.sub(r"(\S+)\|\S+", r"\1", text) if "python" not in text else text
        out.append([a for a in shlex.split(text) if a != "..."])
    return out


ALL = [(p.name, c) for p in PAGES for c in documented_commands(p.read_text())]


def test_the_pages_document_commands():
    names = {page for page, _ in ALL}
    assert {"README.md", "index.md", "sweeps.md", "configuration.md", "cli.md"} <= names
    assert len(ALL) > 30


def _overrides(args: list[str]) -> list[str]:
    """The overrides among train.py's arguments (Hydra's flags and their values left out)."""
    out, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg in ("--cfg", "-c", "--package", "-p"):
            skip = True
        elif not arg.startswith("-"):
            out.append(arg)
    return out


def _one_job(overrides: list[str]) -> list[str]:
    """A sweep's overrides as one of its jobs: the first value of each list or range, the low
    end of an interval."""
    job = []
    for ov in OverridesParser.create().parse_overrides(overrides):
        value = ov.value()
        if isinstance(value, ChoiceSweep):
            value = value.list[0]
        elif isinstance(value, RangeSweep):
            value = value.start
        elif isinstance(value, IntervalSweep):
            value = value.start
        if ov.is_sweep_override():
            job.append(f"{ov.get_key_element()}={value}")
        else:
            job.append(ov.input_line)
    return job


@pytest.mark.parametrize(
    "page,command",
    [pytest.param(p, c, id=f"{p}:{c[:60]}") for p, c in ALL if c.startswith("python")],
)
def test_a_documented_train_command_composes_and_validates(page, command, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for args in concrete(command, tmp_path):
        overrides = _one_job(_overrides(args[2:]))
        app = Path(args[1]).stem  # train or eval
        cfg = compose(overrides, app=app, validate=False, with_hydra=True)
        own = {"hydra", *EVAL_KEYS}  # eval.py's own keys are not a run config's
        job = OmegaConf.masked_copy(cfg, [k for k in cfg if k not in own])
        if any(o.startswith("model._target_=my_pkg.") for o in overrides):
            continue  # your own package: components.md shows how; it does not exist here
        validate(job)
    GlobalHydra.instance().clear()


@pytest.mark.parametrize(
    "page,command", [pytest.param(p, c, id=f"{p}:{c}") for p, c in ALL if c.startswith("sporeflow")]
)
def test_a_documented_sporeflow_command_parses(page, command, tmp_path):
    for args in concrete(command, tmp_path):
        parser().parse_args(args[1:])  # argparse exits 2 on a bad argument


# -- the generated option reference --------------------------------------------------------


def test_every_schema_and_sweeper_field_has_a_meaning():
    from hydra_plugins.sporeflow_optuna_sweeper.optuna_sweeper import SporeflowOptunaSweeperConf
    from hydra_plugins.sporeflow_race_sweeper.race_sweeper import SporeflowRaceSweeperConf

    sweeper = [o for n in reference.nodes(SporeflowOptunaSweeperConf) for o in n.options]
    race = [o for n in reference.nodes(SporeflowRaceSweeperConf) for o in n.options]
    missing = [o.key for o in [*reference.options(), *sweeper, *race] if not o.meaning]
    assert not missing, f"fields without a docstring under them: {missing}"
    assert {o.key for o in sweeper} >= {"n_trials", "storage", "pruner", "seeds"}
    assert {o.key for o in race} >= {"max_seeds", "first_test", "alpha", "params"}


def _rows(markdown: str) -> dict[str, list[str]]:
    rows = {}
    for line in markdown.splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        if cells and cells[0].startswith("`") and cells[0] != "`key`":
            rows[cells[0].strip("`")] = cells[1:]
    return rows


def _leaves(node: dict, prefix: str = ""):
    for key, value in node.items():
        path = f"{prefix}{key}"
        if (
            isinstance(value, dict)
            and value
            and key not in ("model", "dataset", "optimizer", "loss")
        ):
            yield from _leaves(value, path + ".")
        else:
            yield path, value


def test_the_reference_lists_every_field_with_the_schemas_default_and_range():
    """Checked against OmegaConf's own view of the structured schema, not the generator's."""
    rows = _rows(reference.schema_markdown())
    leaves = dict(
        _leaves(OmegaConf.to_container(OmegaConf.structured(RunConfig), enum_to_str=True))
    )
    assert set(rows) == set(leaves)
    for key, default in leaves.items():
        assert yaml.safe_load(rows[key][1].strip("`")) == default, key
    assert rows["epochs"][2] == ">= 1"
    assert rows["boost.rho"][2] == "in (0, 1)"
    assert rows["parallel.mode"][2] == "standalone, data, semi_auto, auto"
    assert rows["boost.baselines"][0] == "list of choice"


def test_every_group_option_in_conf_is_in_the_group_table_with_what_it_is():
    table = reference.groups_markdown(CONF)
    for file in CONF.glob("*/*.yaml"):
        if file.parent.name == "hydra":
            continue
        assert f"### `{file.parent.name}`" in table
        row = next(ln for ln in table.splitlines() if ln.startswith(f"| `{file.stem}` |"))
        assert len(row.split(" | ")[1]) > 10, f"{file} has no header comment saying what it is"
    assert "`optimizer.lr=0.02`" in table  # momentum.yaml's own value
    assert "`model=lenet5`" in table  # a preset's pick of another group


def test_the_site_pages_are_all_in_the_nav_and_no_option_table_is_written_by_hand():
    nav = yaml.safe_load((REPO / "mkdocs.yml").read_text().split("\nhooks:")[0])
    pages = {p.name for p in (REPO / "docs").glob("*.md")}
    listed = set(re.findall(r"([\w-]+\.md)", (REPO / "mkdocs.yml").read_text()))
    assert pages <= listed, pages - listed
    assert nav["strict"] is True
    for page in PAGES:
        text = page.read_text()
        assert "| key | default |" not in text, f"{page.name}: a hand-written option table"


def test_a_notebook_page_shows_text_code_printed_values_and_figures_not_the_console(tmp_path):
    """docs/hooks.py's rendering of a notebook: what a reader of the page needs, without a
    run's console (its log lines on stdout, everything on stderr)."""
    import importlib.util
    import json

    spec = importlib.util.spec_from_file_location("docs_hooks", REPO / "docs" / "hooks.py")
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    cells = [
        {"cell_type": "markdown", "source": ["# Title\n", "words"]},
        {
            "cell_type": "code",
            "source": ["x = 1\n", "x"],
            "outputs": [
                {
                    "output_type": "stream",
                    "name": "stdout",
                    "text": ["[2026-11-28 11:12:02,061][a][INFO] - a log line\n", "printed\n"],
                },
                {"output_type": "stream", "name": "stderr", "text": "[sporeflow] train: acc=...\n"},
                {"output_type": "execute_result", "data": {"text/plain": ["1"]}},
                {
                    "output_type": "display_data",
                    "data": {"image/png": "iVBORw0=\n", "text/plain": ["<Figure>"]},
                },
                {
                    "output_type": "execute_result",
                    "data": {"text/html": ["<table></table>"], "text/plain": ["t"]},
                },
            ],
        },
    ]
    notebook = tmp_path / "n.ipynb"
    notebook.write_text(json.dumps({"cells": cells, "nbformat": 4}))
    assert hooks.notebook_markdown(notebook) == (
        "# Title\nwords\n\n```python\nx = 1\nx\n```\n\n```text\nprinted\n```\n\n```text\n1\n```"
        '\n\n<img alt="a figure of the notebook" src="data:image/png;base64,iVBORw0=">'
        "\n\n<table></table>\n"
    )


# what marks a generated part of a page: the site puts it in, a raw reader sees only the marker
GENERATED = re.compile(r"^(<!-- (reference|include|notebook): [\w.-]+ -->|::: [\w.]+)$", re.M)
RAW_ONLY = re.compile(r"<!-- raw -->\n(?P<note>.*?)<!-- /raw -->\n", re.S)


def test_a_raw_page_says_where_its_generated_parts_are_read():
    """Read raw (on GitHub, as the README invites), a page whose part the site generates says
    before that part where it is read (the built site: `make docs`); the site leaves that note
    out (docs/hooks.py)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("docs_hooks", REPO / "docs" / "hooks.py")
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    pages = [p for p in sorted((REPO / "docs").glob("*.md")) if GENERATED.search(p.read_text())]
    assert {p.name for p in pages} >= {"api.md", "tutorial.md", "sweeps.md", "reference.md"}
    for page in pages:
        text = page.read_text()
        for marker in GENERATED.finditer(text):
            before = text[: marker.start()]
            notes = list(RAW_ONLY.finditer(before))
            assert notes, f"{page.name}: {marker[0]} without a raw note before it"
            assert "make docs" in notes[-1]["note"], f"{page.name}: {notes[-1]['note']}"
        assert "<!-- raw -->" not in hooks.RAW_ONLY.sub("", text), page.name
    built = hooks.on_page_markdown((REPO / "docs" / "reference.md").read_text())
    assert "<!-- raw -->" not in built and "make docs-serve" not in built
