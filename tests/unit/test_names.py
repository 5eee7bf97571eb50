"""Names are written once (core.names): no module compares, indexes or lists a stage's kind as
a string literal, and every `sporeflow.<x>` MLflow tag key is spelled only in core.names.

Both checks read the source (an AST walk), and each is tried on a planted violation first."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from sporeflow.core import names
from sporeflow.core.names import StageKind

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "sporeflow"
NAMES = PACKAGE / "core" / "names.py"

KINDS = {k.value for k in StageKind}
# "train" is also a data split and the training app's name: a "train" literal is a stage kind
# only where it meets a stage's name (compared with `stage`, `name`, `kind`, ...) or stands
# among other kinds (every other kind's literal is one wherever it stands)
AMBIGUOUS = {StageKind.train.value}
STAGE_WORDS = re.compile(r"stage|name|kind|arm")

# A `sporeflow.<x>` tag key: one word after the package's name (a module, `sporeflow.a.b`, and a
# call, `sporeflow.run(`, are not tags)
TAG = re.compile(r"(?<![\w.])sporeflow\.[a-z_]+(?![\w.(])")
RESOLVER_REGISTRATION = "register_new_resolver"  # `${sporeflow.uid:}`: an OmegaConf resolver

# Modules another engineer rewrites (issue 62, steps 1-3) that still spell a name themselves:
# (module, the literal). Remove a line when its module imports the name from core.names.
PENDING: set[tuple[str, str]] = set()


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the strings that stand alone as statements: docstrings, a field's or a
    constant's (prose: they may name a kind or a tag)."""
    return {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }


def _strings(node: ast.AST) -> list[ast.Constant]:
    return [n for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def _is_kind(constant: ast.Constant, context: ast.AST | None, source: str) -> bool:
    """Whether a string literal names a stage's kind where it stands (`context`: the node that
    uses it: a comparison, a subscript, a collection, a call)."""
    if constant.value not in KINDS:
        return False
    if constant.value not in AMBIGUOUS:
        return True
    if isinstance(context, ast.Tuple | ast.List | ast.Set):  # among other kinds
        return any(
            isinstance(e, ast.Constant) and e.value in KINDS - AMBIGUOUS for e in context.elts
        )
    if isinstance(context, ast.Compare):  # `stage == "train"`, not `split == "train"`
        others = [o for o in (context.left, *context.comparators) if o is not constant]
        return any(STAGE_WORDS.search(ast.get_source_segment(source, o) or "") for o in others)
    return False


def stage_kind_literals(source: str) -> list[tuple[int, str]]:
    """(line, literal) of each stage kind spelled as a string in `source`: anywhere for a kind
    that names nothing else, where it meets a stage's name for "train"."""
    tree = ast.parse(source)
    skip = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            if (
                isinstance(child, ast.Constant)
                and isinstance(child.value, str)
                and id(child) not in skip
                and _is_kind(child, node, source)
            ):
                found.append((child.lineno, child.value))
    return sorted(set(found))


def tag_literals(source: str) -> list[tuple[int, str]]:
    """(line, key) of each `sporeflow.<x>` tag key spelled in a string of `source` (docstrings
    and the names of OmegaConf resolvers aside)."""
    tree = ast.parse(source)
    skip = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == RESOLVER_REGISTRATION:
            skip.update(id(c) for c in _strings(node.args[0]) if node.args)
    return sorted(
        {
            (c.lineno, key)
            for c in _strings(tree)
            if id(c) not in skip
            for key in TAG.findall(c.value)
        }
    )


def _modules():
    return sorted(p for p in PACKAGE.rglob("*.py") if p != NAMES)


def _name(path: Path) -> str:
    return path.relative_to(PACKAGE).as_posix()


PLANTED_KIND = '''
"""A docstring may say "stage2"."""
STAGES = ("stage1", "stage2")
def f(results, stage, split):
    """Nor here: "budget"."""
    if stage == "train" or split == "train":
        return results["snapshot_mean"]
    return stage in ("baseline",), results.get("annealed"), "train"
'''


def test_the_stage_kind_check_finds_a_planted_literal():
    assert stage_kind_literals(PLANTED_KIND) == [
        (3, "stage1"),
        (3, "stage2"),
        (6, "train"),
        (7, "snapshot_mean"),
        (8, "annealed"),
        (8, "baseline"),
    ]
    assert stage_kind_literals('SPLITS = ("train", "val")\nif split == "train": pass\n') == []
    assert stage_kind_literals('x = ("train", "stage1")\n') == [(1, "stage1"), (1, "train")]


def test_the_tag_check_finds_a_planted_literal():
    source = '''
"""`sporeflow.failure` in prose is no tag."""
OmegaConf.register_new_resolver("sporeflow.uid", uid)
log = logging.getLogger("sporeflow.tracking.writer")
run.set_tags({"sporeflow.failure": why})
found = search(f"tags.`sporeflow.run_key` = '{key}'")
sporeflow_run = "see sporeflow.run(...)"
'''
    assert tag_literals(source) == [(5, "sporeflow.failure"), (6, "sporeflow.run_key")]


@pytest.mark.parametrize("path", _modules(), ids=_name)
def test_no_module_spells_a_stage_kind(path):
    found = stage_kind_literals(path.read_text())
    assert not found, f"{_name(path)}: use core.names.StageKind, not {found}"


@pytest.mark.parametrize("path", _modules(), ids=_name)
def test_sporeflow_tags_are_spelled_only_in_core_names(path):
    found = [
        (line, key)
        for line, key in tag_literals(path.read_text())
        if (_name(path), key) not in PENDING
    ]
    assert not found, f"{_name(path)}: import the tag key from core.names, not {found}"


def test_core_names_spells_each_tag_once():
    keys = [v for k, v in vars(names).items() if k.endswith("_TAG") and isinstance(v, str)]
    assert len(keys) == len(set(keys))
    assert {key for _, key in tag_literals(NAMES.read_text())} <= set(keys)


def test_pending_exceptions_are_still_needed():
    """A pending module that no longer spells its literal: drop it from PENDING."""
    for module, key in PENDING:
        assert key in {k for _, k in tag_literals((PACKAGE / module).read_text())}, module
