"""Bad input, one table: every user-fixable mistake is answered with exit 2 and one line per
problem that names the key or file and what is allowed - no traceback, no MLflow run, no run
dir - before any work starts. `python train.py`'s own entry (run_cli and the @hydra.main
function) in this process, real files in the real formats; tests/e2e/test_bad_input.py runs
the same refusal as a real process."""

from __future__ import annotations

import re
import shlex
import shutil
import sys

import numpy as np
import pytest
import yaml

from helpers.formats import write_idx, write_jpeg_tree
from helpers.inprocess import TINY, train_cli


def idx_tree(root, labels_max=9, magic_ok=True):
    rng = np.random.default_rng(0)
    for split, n in (("train", 64), ("test", 16)):
        write_idx(
            root,
            split,
            rng.integers(0, 255, (n, 28, 28)),
            rng.integers(0, labels_max + 1, n),
            gz=False,
        )
    if not magic_ok:
        (root / "train-images-idx3-ubyte").write_bytes(b"\x00\x00\x08\x99" + b"\x00" * 100)


def make_inputs(tmp):
    """The files the table's cases point at."""
    (tmp / "empty").mkdir()
    idx_tree(tmp / "idx_bad_magic", magic_ok=False)
    idx_tree(tmp / "idx_labels", labels_max=9)
    idx_tree(tmp / "idx_not_gzip")
    (tmp / "idx_not_gzip" / "train-images-idx3-ubyte").unlink()
    (tmp / "idx_not_gzip" / "train-images-idx3-ubyte.gz").write_bytes(b"not gzip at all")
    write_jpeg_tree(tmp / "tree_ok", train=1, val=1)
    write_jpeg_tree(tmp / "tree", train=1, val=1)
    shutil.rmtree(tmp / "tree" / "val")  # ImageFolder without val/
    write_jpeg_tree(tmp / "tree_cut", train=1, val=1)  # one JPEG cut after 300 bytes
    cut = tmp / "tree_cut" / "train" / "n02" / "0.JPEG"
    cut.write_bytes(cut.read_bytes()[:300])
    write_jpeg_tree(tmp / "tree_extra", train=1, val=1)  # a val/ class train/ lacks
    shutil.copytree(tmp / "tree_extra" / "val" / "n01", tmp / "tree_extra" / "val" / "n09")
    np.save(tmp / "basis_shape.npy", np.zeros((4, 10), np.float32))
    np.save(tmp / "basis_int.npy", np.zeros((4, 10), np.int64))
    np.save(tmp / "basis_pickle.npy", np.array([{"evil": 1}], dtype=object), allow_pickle=True)
    (tmp / "basis_text.npy").write_text("not an array")
    return tmp


CASES = {
    "preset that does not exist": (
        ["experiment=nope"],
        ["experiment=nope: no such option", "lenet_fashion_mnist"],
    ),
    "group option that does not exist": (
        ["model=nope"],
        ["model=nope: no such option", "lenet5, mlp"],
    ),
    "typo in a component key": (
        ["optimizer.lrr=0.1"],
        ["optimizer.lrr: no such key", "lr, momentum, weight_decay"],
    ),
    "a key added with + that the component does not take": (
        ["+optimizer.lrr=0.1"],
        ["optimizer.lrr is not a setting", "allowed: lr"],
    ),
    "typo in a top-level key": (["epochz=3"], ["epochz: no such key", "epochs, seed"]),
    "a setting the component takes that its group file does not list": (
        ["dataset.drop_remainder=true"],
        ["dataset.drop_remainder: a setting the dataset takes", "+dataset.drop_remainder=<value>"],
    ),
    "a value outside its range": (["optimizer.lr=-0.1"], ["optimizer.lr=-0.1: must be > 0"]),
    "a device this MindSpore installation cannot run": (
        ["device_target=GPU"],
        ["device_target=GPU: this MindSpore", "has no GPU device or backend; it runs on: CPU"],
    ),
    "a preset made for a device this machine lacks": (
        ["experiment=mnist_semi_auto"],
        ["device_target=Ascend: this MindSpore", "it runs on: CPU"],
    ),
    "typo in a framework key": (
        ["callbacks.checkpont.keep=1"],
        ["callbacks.checkpont: no such key", "checkpoint"],
    ),
    "wrong type for a component argument": (
        ["optimizer.lr=fast"],
        ["optimizer.lr='fast': must be a number"],
    ),
    "wrong type for a framework key": (
        ["train.ema.decay=abc"],
        ["train.ema.decay='abc': must be float"],
    ),
    "value outside an enum": (["mode=eager"], ["mode", "graph, pynative"]),
    "schedule that does not exist": (
        ["optimizer.schedule.name=cosin"],
        ["optimizer.schedule.name='cosin'", "cosine"],
    ),
    "data folder missing": (
        ["dataset=mnist", "dataset.root={tmp}/nope"],
        ["dataset.root={tmp}/nope", "does not exist"],
    ),
    "data folder empty": (
        ["dataset=mnist", "dataset.root={tmp}/empty"],
        ["dataset.root={tmp}/empty lacks", "train-images-idx3-ubyte"],
    ),
    "IDX file of another format": (
        ["dataset=mnist", "dataset.root={tmp}/idx_bad_magic", "dataset.cache_dir={tmp}/c1"],
        ["train-images-idx3-ubyte is not an IDX file"],
    ),
    "gzipped IDX file that is not gzip": (
        ["dataset=mnist", "dataset.root={tmp}/idx_not_gzip", "dataset.cache_dir={tmp}/c2"],
        ["cannot expand", "train-images-idx3-ubyte.gz"],
    ),
    "label outside num_classes": (
        ["dataset=mnist", "dataset.root={tmp}/idx_labels", "dataset.num_classes=5"],
        ["label 9, outside 0..4", "dataset.num_classes=5"],
    ),
    "a negative validation split": (
        ["dataset.val_split=-0.1"],
        ["dataset.val_split=-0.1: must be >= 0"],
    ),
    "a validation fraction of 1 or more that is not a count": (
        ["dataset=mnist", "dataset.root={tmp}/idx_labels", "dataset.val_split=1.5"],
        ["dataset.val_split=1.5: a fraction must be below 1", "or 0 (no validation split"],
    ),
    "a validation count that leaves the training split empty": (
        ["dataset=mnist", "dataset.root={tmp}/idx_labels", "dataset.val_split=64"],
        ["dataset.val_split=64 holds out 64 of the training split's 64 images and leaves it empty"],
    ),
    "a validation count that takes every image of a class": (
        ["dataset=mnist", "dataset.root={tmp}/idx_labels", "dataset.val_split=60"],
        ["dataset.val_split=60 holds out every training image of class(es)"],
    ),
    "CIFAR folder without its files": (
        ["dataset=cifar10", "dataset.root={tmp}/empty"],
        ["lacks data_batch_1.bin"],
    ),
    "ImageFolder without val/": (["dataset=imagenet", "dataset.root={tmp}/tree"], ["lacks val/"]),
    "ImageFolder with an image the decoder cannot read": (
        ["dataset=imagenet", "dataset.root={tmp}/tree_cut", "dataset.num_classes=3"],
        ["{tmp}/tree_cut/train/n02/0.JPEG: not a readable image"],
    ),
    "ImageFolder whose val/ has a class train/ lacks": (
        ["dataset=imagenet", "dataset.root={tmp}/tree_extra", "dataset.num_classes=4"],
        ["{tmp}/tree_extra/val: class folder(s) n09 not in the training split"],
    ),
    "ImageFolder with more classes than num_classes": (
        ["dataset=imagenet", "dataset.root={tmp}/tree_ok", "dataset.num_classes=2"],
        ["3 class folders", "num_classes=2"],
    ),
    "resume from a folder that does not exist": (
        ["resume={tmp}/nope"],
        ["resume={tmp}/nope", "does not exist"],
    ),
    "resume from a folder without checkpoints": (["resume={tmp}/empty"], ["resume={tmp}/empty"]),
    "PCA basis of the wrong shape": (
        ["boost=dim_reduce", "boost.n_component=4", "boost.pca_mat_path={tmp}/basis_shape.npy"],
        ["boost.pca_mat_path=", "shape (4, 10)", "boost.n_component=4 need (4, "],
    ),
    "PCA basis of the wrong dtype": (
        ["boost=dim_reduce", "boost.n_component=4", "boost.pca_mat_path={tmp}/basis_int.npy"],
        ["dtype int64", "float32, float64"],
    ),
    "PCA basis of pickled objects": (
        ["boost=dim_reduce", "boost.n_component=4", "boost.pca_mat_path={tmp}/basis_pickle.npy"],
        ["pickled Python objects", "never loads"],
    ),
    "PCA basis that is not .npy": (
        ["boost=dim_reduce", "boost.n_component=4", "boost.pca_mat_path={tmp}/basis_text.npy"],
        ["not a .npy array"],
    ),
    "fine-tune from a folder that is not a run": (
        ["train.init_from={tmp}/empty"],
        ["train.init_from={tmp}/empty: ", "holds no .hydra/config.yaml (not a run dir)"],
    ),
    "fine-tune from a run id the store does not have": (
        ["train.init_from=0123456789abcdef0123456789abcdef"],
        ["train.init_from=0123456789abcdef0123456789abcdef: no such MLflow run"],
    ),
    "a freeze prefix that matches no parameter": (
        ["train.freeze=[conv9]"],
        ["train.freeze: conv9 matches no parameter of LeNet5", "conv1, conv2, fc1, fc2, fc3"],
    ),
    "freezing every parameter": (
        ["train.freeze=[conv1,conv2,fc1,fc2,fc3]"],
        ["keeps every parameter fixed: nothing to train"],
    ),
    "freezing with dim_reduce": (
        ["boost=dim_reduce", "train.freeze=[conv1]"],
        ["train.freeze with boost=dim_reduce is not available yet"],
    ),
    "an RGB-only augmentation on grey images": (
        ["augment.ops=[randaugment,random_erasing]"],
        ["augment.ops: randaugment takes RGB images and dataset.channels=1", "random_erasing"],
    ),
    "mixed batches with a loss that takes integer labels only": (
        ["augment.mix=cutmix", "loss=ce_expand"],
        ["augment.mix=cutmix trains on mixed (soft) labels", "SoftmaxCrossEntropyExpand"],
    ),
    "a mixing ratio of zero": (
        ["augment.mix=mixup", "augment.mix_alpha=0"],
        ["augment.mix_alpha=0", "must be > 0"],
    ),
    "sliced checkpoints in a format merge-ckpt cannot join": (
        ["callbacks.checkpoint.format=safetensors", "parallel.integrated_save=false"],
        ["callbacks.checkpoint.format=safetensors with parallel.integrated_save=false", "as ckpt"],
    ),
    "a checkpoint format MindSpore does not write": (
        ["callbacks.checkpoint.format=pt"],
        ["callbacks.checkpoint.format", "ckpt", "safetensors"],
    ),
    "device_num that disagrees with workers": (
        ["parallel=data2", "parallel.device_num=4"],
        ["parallel.device_num=4 must equal parallel.workers=2"],
    ),
    "sweep objective the run does not report": (
        ["sweep.objective=gain"],
        ["sweep.objective='gain'; allowed: auto, val/acc, val/loss (boost=none)"],
    ),
    "a sweep objective on the test images (issue 61)": (
        ["sweep.objective=test/acc"],
        ["sweep.objective='test/acc': a choice is scored on the validation split", "use 'val/acc'"],
    ),
    "a cost as the first of two objectives (issue 63)": (
        ["sweep.objective=[cost/passes,val/acc]"],
        ["sweep.objective=[cost/passes,val/acc]: a cost is never the first objective"],
    ),
    "a test objective in a list (issue 63)": (
        ["sweep.objective=[test/acc,cost/passes]"],
        ["sweep.objective=[test/acc,cost/passes]: 'test/acc': a choice is scored on the"],
    ),
    "a pipeline's cost named for a plain job (issue 63)": (
        ["sweep.objective=[val/acc,stage2/passes]"],
        ["stage2/passes is not a plain job's cost; allowed: cost/passes"],
    ),
    "three objectives (issue 63)": (
        ["sweep.objective=[val/acc,val/loss,cost/passes]"],
        ["a list is [<accuracy objective>, <cost: cost/passes>] (or one objective)"],
    ),
    "a model target that is not a network (it would create a file)": (
        [
            "model._target_=builtins.open",
            "~model.num_classes",
            "~model.num_channel",
            "+model.file={tmp}/planted",
            "+model.mode=w",
        ],
        [
            "model._target_=builtins.open: not a model (nothing is called)",
            "a subclass of mindspore.nn.Cell",
        ],
    ),
    "a model target that runs a command": (
        [
            "model._target_=os.system",
            "~model.num_classes",
            "~model.num_channel",
            "+model.command=true",
        ],
        ["model._target_=os.system: not a model", "a function annotated to return one"],
    ),
    "a model target in a module of Python's own that runs when imported": (
        ["model._target_=this.LeNet5"],
        [
            "model._target_=this.LeNet5: 'this' is a module of Python's standard library "
            "(nothing imported)",
            "allowed: a class or function of an installed package or of your own modules",
        ],
    ),
    "a model target in a package's __main__ (a script)": (
        ["model._target_=pip.__main__.Net"],
        ["model._target_=pip.__main__.Net: pip.__main__ is a script", "(nothing imported)"],
    ),
    "an optimizer target that is a network": (
        ["optimizer._target_=sporeflow.models.mlp.MLP"],
        ["optimizer._target_=sporeflow.models.mlp.MLP: not an optimizer", "Optimizer"],
    ),
    "a dataset target that is a loss": (
        ["dataset._target_=mindspore.nn.SoftmaxCrossEntropyWithLogits"],
        [
            "dataset._target_=mindspore.nn.SoftmaxCrossEntropyWithLogits: not a dataset",
            "ImageDataset",
        ],
    ),
    "a tracking uri that is a file name": (
        ["tracking.uri=mlflow.db"],
        ["tracking.uri=mlflow.db: not a store URI", "sqlite:///", "did you mean sqlite:///"],
    ),
    "an http tracking uri with a space": (
        ["tracking.uri='http://127.0.0.1:1/a b'"],
        ["tracking.uri=http://127.0.0.1:1/a b: ", "space"],
    ),
    "an experiment name over MLflow's limit": (
        ["tracking.experiment_name=" + "e" * 600],
        ["tracking.experiment_name=eeee", "600 characters; MLflow keeps at most 500"],
    ),
    "a run name over MLflow's limit": (
        ["tracking.run_name=" + "r" * 300],
        ["tracking.run_name=rrrr", "300 characters; MLflow keeps at most 250 in a run's name"],
    ),
    "a param value over MLflow's limit": (
        ["sweep.registered_model=" + "m" * 7000],
        ["sweep.registered_model=mmmm", "7000 characters; MLflow keeps at most 6000 of a param's"],
    ),
    "a command line over MLflow's limit of a tag (each value under a param's)": (
        ["sweep.registered_model=" + "m" * 5000, "tracking.uri=sqlite:////tmp/" + "u" * 4000],
        ["tag overrides=", "MLflow keeps at most 8000 of a tag's value"],
    ),
    "stage-1 reuse across nodes": (
        ["boost=dim_reduce", "parallel=data2", "parallel.nodes=2", "boost.stage1_run=0123abcd"],
        ["boost.stage1_run with parallel.nodes=2", "cannot read"],
    ),
}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    return make_inputs(tmp_path_factory.mktemp("inputs"))


def refused(args, tmp_path) -> list[str]:
    """The refusal's lines (exit 2, nothing else printed, nothing left behind)."""
    code, err = train_cli(args, tmp_path)
    assert code == 2, err[-3000:]
    assert err.startswith(("Config error: ", "Data error: ")), err[-3000:]
    lines = err.rstrip("\n").split("\n")
    assert lines[-1].endswith("  (python train.py --help lists groups and options)")
    assert "Traceback" not in err and "Error executing job" not in err
    assert not (tmp_path / "run").exists(), "a refused command left a run dir"
    assert tmp_path.is_dir(), "the cleanup removed more than the run dir"
    assert not (tmp_path / "mlflow.db").exists(), "a refused command touched the MLflow store"
    lines[0] = lines[0].split(": ", 1)[1]
    lines[-1] = lines[-1].removesuffix("  (python train.py --help lists groups and options)")
    return lines


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_exits_2_with_one_line_before_any_work(tmp_path, inputs, case):
    args, expected = CASES[case]
    args = [a.format(tmp=inputs) for a in args]
    (body,) = refused(args, tmp_path)
    leading_key = re.match(r"([\w.+~]+)=", body)  # the key= a line opens with, if any
    if leading_key:
        assert body.count(leading_key.group(0)) == 1, f"the line repeats its key: {body}"
    for text in expected:
        assert text.format(tmp=inputs) in body, body


def test_a_hostile_target_is_refused_before_it_is_called(tmp_path, inputs):
    """builtins.open as the model with a file and mode beside it: refused, and the file it
    would have created does not exist (nothing was called)."""
    args = [
        a.format(tmp=tmp_path)
        for a in CASES["a model target that is not a network (it would create a file)"][0]
    ]
    refused(args, tmp_path)
    assert not (tmp_path / "planted").exists()


@pytest.mark.parametrize("app", ["train", "eval"])
def test_a_refusal_in_hydras_own_run_dir_leaves_no_empty_folders(tmp_path, app):
    """Without hydra.run.dir Hydra makes outputs/<date>/<time>/ (eval.py: outputs/eval/...)
    before anything is checked; a refused command takes away every folder it made."""
    args = ["epochs=-1"] if app == "train" else [f"source={tmp_path / 'nowhere'}"]
    code, err = train_cli(args, tmp_path, run_dir=None, app=app)
    assert code == 2, err[-2000:]
    assert list(tmp_path.iterdir()) == [], list(tmp_path.rglob("*"))


# the commands whose refusals docs/troubleshooting.md quotes: the line each prints is on the page
QUOTED = [
    ["optimizer.lrr=0.1"],
    ["experiment=nope"],
    ["optimizer.lr=fast"],
    ["optimizer.lr=-0.1"],
    ["tracking.uri=mlflow.db"],
    ["model._target_=builtins.open"],
    ["model._target_=this.LeNet5"],
]


@pytest.mark.parametrize("args", QUOTED, ids=lambda a: a[0])
def test_the_troubleshooting_page_quotes_the_line_a_refusal_prints(tmp_path, args):
    from helpers.pages import documented

    code, err = train_cli(args, tmp_path)
    assert code == 2, err[-3000:]
    (line,) = err.rstrip("\n").split("\n")
    line = line.removesuffix("  (python train.py --help lists groups and options)")
    assert documented(line, "troubleshooting.md"), line


def test_every_bad_value_is_reported_at_once(tmp_path):
    """Hydra stops at the first (a type error while composing); the rest are found too."""
    assert refused(["optimizer.lr=-0.1", "epochs=-3", "seed=abc"], tmp_path) == [
        "seed='abc': must be integer in [0, 4294967295]",  # the type and the range at once
        "optimizer.lr=-0.1: must be > 0",
        "epochs=-3: must be >= 1",
    ]


def test_every_unknown_key_is_reported_with_the_closest_known_one(tmp_path):
    lines = refused(["optimizer.lrr=1", "dataset.batch_sizee=3"], tmp_path)
    assert len(lines) == 2
    assert lines[0].startswith(
        "optimizer.lrr: no such key; did you mean optimizer.lr?; allowed under optimizer: lr,"
    )
    assert lines[1].startswith(
        "dataset.batch_sizee: no such key; did you mean dataset.batch_size?; allowed under dataset: batch_size,"
    )


def test_several_values_without_m_say_how_to_sweep_with_the_whole_command(tmp_path):
    """issue 51 item 2: the hint repeats every override of the command (run as suggested, a
    hint without boost=dim_reduce swept plain runs), quoted for the shell."""
    (line,) = refused(
        ["boost=dim_reduce", "boost.rho=0.4,0.7", "tracking.run_name='a b'"], tmp_path
    )
    head = "boost.rho=0.4,0.7: several values run a sweep, which needs -m (python train.py -m "
    assert line.startswith(head), line
    command = line[len(head) - len("python train.py -m ") :].partition(");")[0]
    assert shlex.split(command)[-3:] == [
        "boost=dim_reduce",
        "boost.rho=0.4,0.7",
        "tracking.run_name='a b'",
    ]
    assert line.endswith("); a list is boost.rho=[0.4,0.7]"), line


def test_resume_from_a_file_says_it_is_not_a_run_dir(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# not a run")
    (line,) = refused([f"resume={readme}"], tmp_path)
    assert line.startswith(f"resume={readme}: a file, not a run dir; give the folder a run wrote")
    (line,) = refused([f"resume={tmp_path}"], tmp_path)
    assert line.startswith(f"resume={tmp_path}: not a run dir (no checkpoints/ in it)")


def test_resume_of_the_other_kind_of_run_names_what_the_dir_is(tmp_path):
    """A pipeline's dir (its marker names the pipeline's run) continues only as a dim-reduce
    job, a plain run's dir only as a plain one: each says so before any work."""
    from sporeflow.storage.run_marker import PIPELINE, write_run_marker

    pipeline, plain = tmp_path / "pipeline", tmp_path / "plain"
    write_run_marker(pipeline, mlflow_run_id="sf-x", stage=PIPELINE)
    (plain / "checkpoints").mkdir(parents=True)
    write_run_marker(plain, mlflow_run_id="sf-y", stage="train")
    (line,) = refused([f"resume={pipeline}"], tmp_path)
    assert line == (
        f"resume={pipeline}: {pipeline} is a dim-reduce pipeline's dir; continue it "
        "with its own boost=dim_reduce"
    )
    (line,) = refused(["boost=dim_reduce", f"resume={plain}"], tmp_path)
    assert line == (
        f"resume={plain}: {plain} is a plain run's dir; a boost=dim_reduce job "
        "continues only a pipeline's"
    )


def test_a_setting_of_a_node_that_is_off_is_named_once(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    code, err = train_cli(
        [*TINY, "epochs=1", "boost.rho=0.4", "train.ema.decay=0.5", "augment.mix_alpha=0.2"],
        tmp_path,
    )
    assert code == 0, err[-3000:]
    notes = [line for line in err.splitlines() if line.startswith("[sporeflow] note:")]
    assert notes == [
        "[sporeflow] note: boost.rho=0.4 has no effect: boost=none (it is a setting of boost=dim_reduce)",
        "[sporeflow] note: train.ema.decay=0.5 has no effect while train.ema.enabled=false",
        "[sporeflow] note: augment.mix_alpha=0.2 has no effect while augment.mix=none",
    ]


def test_resume_in_a_sweep_is_refused_before_hydra_makes_anything(tmp_path):
    """`-m resume=true lr=a,b` continued one old run in both jobs and reported its result twice."""
    (line,) = refused(["-m", "resume=true", "optimizer.lr=0.01,0.02"], tmp_path)
    assert line.startswith("resume=true in a sweep (-m): every job would continue that one run")
    assert not (tmp_path / "multirun").exists()


def test_a_refused_sweep_job_does_not_tell_a_sweep_to_add_m(tmp_path):
    """With -m the swept values are each job's own: only the real problem is named."""
    args = ["-m", "tracking.enabled=false", f"hydra.sweep.dir={tmp_path}/multirun"]
    code, err = train_cli([*args, "optimizer.lr=0.01,0.02", "validate=x"], tmp_path, run_dir=None)
    assert code == 2, err[-3000:]
    assert "validate: no such key" in err
    assert "needs -m" not in err and "several values" not in err, err


def deleted_experiment(uri: str, name: str = "sporeflow") -> str:
    """A store at `uri` whose experiment `name` was deleted in MLflow (its id)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    experiment_id = client.create_experiment(name)
    client.delete_experiment(experiment_id)
    return experiment_id


@pytest.mark.parametrize("where", ["launch dir", "tracking.uri", "MLFLOW_TRACKING_URI"])
def test_a_deleted_experiment_is_refused_before_any_work(tmp_path, where):
    """issue 60 item 3: MLflow keeps a deleted experiment's name and refuses runs in it; the job
    trained, waited 30 s and exited 1 naming neither. The default store, a configured one and
    the environment's: exit 2, one line saying how to restore it or choose another name."""
    from helpers.inprocess import run_train_here

    launch, store = tmp_path / "launch", tmp_path / "store"
    launch.mkdir()
    store.mkdir()
    db = launch / "mlflow.db" if where == "launch dir" else store / "mlflow.db"
    uri = f"sqlite:///{db}"
    experiment_id = deleted_experiment(uri)
    args = [f"tracking.uri={uri}"] if where == "tracking.uri" else []
    env = {"MLFLOW_TRACKING_URI": uri} if where == "MLFLOW_TRACKING_URI" else {}
    done = run_train_here([*TINY, *args], launch, env=env)
    assert done.returncode == 2, done.stderr[-3000:]
    (line,) = done.stderr.rstrip("\n").split("\n")
    assert line.startswith(
        f"Config error: tracking.experiment_name=sporeflow: experiment {experiment_id} was "
        f"deleted in the MLflow store {uri}; restore it ("
    ), line
    assert f"mlflow experiments restore --experiment-id {experiment_id})" in line
    assert "or choose another tracking.experiment_name" in line
    assert not (launch / "run").exists()


def test_mlflow_s_limits_are_the_ones_checked_before_work():
    """The limits are written in sporeflow (the check imports no MLflow); MLflow's own."""
    from mlflow.store.tracking.dbmodels.models import SqlRun
    from mlflow.utils import validation

    from sporeflow.tracking import store

    assert store.MAX_EXPERIMENT_NAME_LENGTH == validation.MAX_EXPERIMENT_NAME_LENGTH
    assert store.MAX_KEY_LENGTH == validation.MAX_ENTITY_KEY_LENGTH
    assert store.MAX_PARAM_LENGTH == validation.MAX_PARAM_VAL_LENGTH
    assert store.MAX_TAG_LENGTH == validation.MAX_TAG_VAL_LENGTH
    assert store.MAX_RUN_NAME_LENGTH == SqlRun.__table__.c.name.type.length


OPTUNA, RACE = "hparams_search=dim_reduce_optuna", "hparams_search=dim_reduce_race"

# A sweep is checked whole before its first job (entry.sweep_check, issue 77): each case's line
# names the key, the point (every one of its overrides) and what is allowed; no sweep dir, no
# MLflow store, no Optuna study exists after it.
SWEEP_CASES = {
    "a typo in a swept key": (
        ["boost=dim_reduce", "boost.gama=0.8,0.9"],
        [
            "boost.gama: no such key; did you mean boost.gamma?",
            "[sweep point 1 of 2: boost.gama=0.8]",
        ],
    ),
    "a swept value outside its range after a good one": (
        ["boost.rho=0.4,1.5"],
        ["boost.rho=1.5: must be in (0, 1) [sweep point 2 of 2: boost.rho=1.5]"],
    ),
    "a swept value of the wrong type says the range too": (
        ["boost.rho=0.4,0.7x"],
        ["boost.rho='0.7x': must be float in (0, 1) [sweep point 2 of 2: boost.rho=0.7x]"],
    ),
    "a swept group option that does not exist": (
        ["model=mlp,nope"],
        ["model=nope: no such option; available: lenet5, mlp", "[sweep point 2 of 2: model=nope]"],
    ),
    "a test objective": (
        ["sweep.objective=test/acc", "optimizer.lr=0.01,0.02"],
        ["sweep.objective='test/acc': a choice is scored on the validation split", "use 'val/acc'"],
    ),
    "a test objective in capitals": (["sweep.objective=Test/acc"], ["allowed: auto, val/acc"]),
    "a final/test objective": (["sweep.objective=final/test/acc"], ["allowed: auto, val/acc"]),
    "a test objective second in a list": (
        ["sweep.objective=[val/acc,test/acc]"],
        ["the second objective is a cost (cost/passes)"],
    ),
    "a test objective of an Optuna study": (
        [OPTUNA, "sweep.objective=test/acc"],
        ["sweep.objective='test/acc'", "[search bound 1 of 5: boost.rho=0.3 boost.gamma=0.5"],
    ),
    "a test objective of a race": (
        [RACE, "sweep.objective=test/acc"],
        [
            "sweep.objective='test/acc'",
            "[sweep point 1 of 10: boost.rho=0.4 boost.sigma=0.2 seed=1]",
        ],
    ),
    "a search range whose end is outside the key's range": (
        [OPTUNA, "boost.rho=interval(0.5,1.2)"],
        ["boost.rho=1.2: must be in (0, 1) [search bound 5 of 5:"],
    ),
    "a seed of an Optuna study outside the seeds' range": (
        [
            "hydra/sweeper=sporeflow_optuna",
            "boost.rho=choice(0.5,0.6)",
            "hydra.sweeper.seeds=[1,-3]",
        ],
        ["seed=-3: must be in [0, 4294967295] [search bound 2 of 3: boost.rho=0.5 seed=-3]"],
    ),
    "a race's point outside its key's range": (
        [RACE, "boost.sigma=0.2,1.4"],
        ["boost.sigma=1.4: must be in (0, 1) [sweep point 6 of 10: boost.sigma=1.4 boost.rho=0.4"],
    ),
    "a sampler argument that names a function": (
        [OPTUNA, "+hydra.sweeper.sampler.gamma=os.system"],
        ["hydra.sweeper.sampler.gamma='os.system': optuna.samplers.TPESampler takes", "null"],
    ),
    "a batch larger than the training split at one point": (
        ["dataset.batch_size=32,100000"],
        ["dataset.batch_size=100000: larger than the training split", "point 2 of 2"],
    ),
}


@pytest.mark.parametrize("case", sorted(SWEEP_CASES))
def test_a_sweep_is_refused_whole_before_its_first_job(tmp_path, case):
    """Each case made a sweep dir and a FAILED parent run (or spent an Optuna trial, or ran its
    good job first) before it was refused; now: one line and nothing made."""
    args, expected = SWEEP_CASES[case]
    (body,) = refused(["-m", *args], tmp_path)
    for text in expected:
        assert text in body, body
    assert body.endswith("; no job was started") or "hydra.sweeper." in body, body
    made = sorted(p.name for p in tmp_path.iterdir())
    assert made == [], f"a refused sweep left {made} (a sweep dir, a store, a study)"


@pytest.mark.parametrize(
    ("app", "key"), [("train", "model"), ("eval", "model"), ("eval", "callbacks.hooks[0]")]
)
def test_a_target_is_checked_by_name_before_its_module_is_imported(tmp_path, capsys, app, key):
    """`_target_: this.LeNet5` - on the command line, or in a run dir's stored
    `.hydra/config.yaml` that eval.py source=<run dir> reads - imported `this` (the Zen of
    Python printed) before the check refused it; now it is refused by name: one line naming the
    key (and the stored file), `this` never imported."""
    sys.modules.pop("this", None)
    if app == "train":
        code, err = train_cli(["model._target_=this.LeNet5"], tmp_path)
        file = None
    else:
        run_dir = tmp_path / "outputs" / "stored"
        file = run_dir / ".hydra" / "config.yaml"
        file.parent.mkdir(parents=True)
        stored = {"model": {"_target_": "sporeflow.models.lenet.LeNet5", "num_classes": 10}}
        if key == "model":
            stored["model"]["_target_"] = "this.LeNet5"
        else:
            stored["callbacks"] = {"hooks": [{"_target_": "this.Hook"}]}
        file.write_text(yaml.safe_dump(stored))
        weights = run_dir / "checkpoints" / "final.ckpt"  # never read: the config is refused
        weights.parent.mkdir()
        weights.write_bytes(b"weights")
        code, err = train_cli([f"source={run_dir}"], tmp_path, app="eval")
    assert "this" not in sys.modules, "the module was imported"
    assert "Beautiful is better than ugly" not in capsys.readouterr().out
    assert code == 2, err[-3000:]
    (line,) = err.strip().splitlines()
    target = "this.LeNet5" if key == "model" else "this.Hook"
    where = "" if file is None else f" in {file}"
    assert f"{key}._target_={target}{where}: 'this' is a module of Python's standard" in line
    assert not (tmp_path / "run").exists()


def test_the_python_api_refuses_a_sweep_whole_as_the_command_does(tmp_path, monkeypatch):
    """`sporeflow.sweep` runs Hydra's multirun in this process: the same check, the same line
    as a ConfigError, nothing made (its good first point is not run either)."""
    from sporeflow.core.errors import ConfigError
    from sporeflow.entry.python_api import sweep

    monkeypatch.chdir(tmp_path)
    with pytest.raises(
        ConfigError, match=r"boost.rho=1.5: must be in \(0, 1\) \[sweep point 2 of 2"
    ):
        sweep([*TINY, "boost.rho=0.4,1.5"])
    assert sorted(p.name for p in tmp_path.iterdir()) == []
