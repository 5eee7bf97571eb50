"""Names that several modules write and read: the kinds of stage a job runs and the MLflow tag
keys. One place, so a writer and its readers cannot drift apart (a stage's MLflow run, its
folder and its metrics' prefix are all named by its kind)."""

from __future__ import annotations

from enum import Enum


class StageKind(str, Enum):
    """What a stage is in its job; the value names its MLflow run, its folder under the run dir
    and its metrics' prefix in a pipeline's parent (`val/stage2/acc`). A str: it equals, hashes
    and formats as its value (`__str__`/`__format__` below; enum.StrEnum needs Python 3.11), so
    a dict keyed by kind is read with the plain name and records written before read the same."""

    train = "train"  # a plain job's one stage
    stage1 = "stage1"  # dim-reduce stage 1: plain training that keeps weight snapshots
    stage2 = "stage2"  # dim-reduce stage 2: steps in the snapshots' PCA subspace
    baseline = "baseline"  # plain training continued from stage 1 for stage 2's epochs
    annealed = "annealed"  # the same at boost.anneal_factor x the rate
    snapshot_mean = "snapshot_mean"  # the mean of stage 1's snapshots, evaluated, not trained
    budget = "budget"  # plain training for what stage 2 spent, its rate decayed to zero

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


# --- MLflow tags -------------------------------------------------------------------------------
# The tag keys one module writes and another reads (a store written before reads the same: the
# values never change). "w:" says who writes a tag, "r:" who reads it.

# Every run of a job (job.runs.config_tags / start_job_run, a child stage's run in job.runner)
STAGE_TAG = "stage"  # a StageKind, "pipeline" or "sweep"; r: report.sweep_report,
# tracking.store_reads, tracking.models, entry.cli, entry.sweep_study, entry.python_api
RUN_DIR_TAG = "run_dir"  # w: job.runs, stage.spec (a stage's folder); r: job.reuse,
# job.dim_reduce_pipeline, stage.source, entry.python_api
OVERRIDES_TAG = "overrides"  # the command line's overrides; w: job.runs; r: report.sweep_report,
# report.pipeline_table
SWEEP_RUN_ID_TAG = "sweep.run_id"  # a sweep job's parent run; w: job.runs; r: entry.cli,
# entry.sweep_summary, report.sweep_report, report.views, report.pipeline_table
SWEEP_JOB_TAG = "sweep.job"  # a sweep job's number; w: job.runs; r: entry.sweep_summary,
# report.sweep_report

# A sweep's parent run (entry.sweep_run, entry.sweep_summary, entry.sweep_study)
SWEEP_KEYS_TAG = "sweep.keys"  # the swept keys; w: entry.sweep_run; r: report.sweep_report
SWEEP_OBJECTIVE_TAG = "sweep.objective"  # w: entry.sweep_run; r: report.sweep_report
SWEEP_COST_TAG = "sweep.cost"  # w: entry.sweep_run; r: report.sweep_report
SWEEP_VIEW_TAG = "sweep.view"  # its shared MLflow view; w: entry.sweep_summary;
# r: report.sweep_report
SWEEP_BEST_RUN_TAG = "sweep.best_run_id"  # w: entry.sweep_summary; r: report.sweep_report
OPTUNA_STUDY_TAG = "optuna.study"  # w: entry.sweep_study; r: entry.study_dashboard
OPTUNA_STORAGE_TAG = "optuna.storage"  # w: entry.sweep_study; r: entry.study_dashboard
FRONT_TAG = "sporeflow.front"  # the Pareto front's labels; w: entry.sweep_summary
DECISION_TAG = "sporeflow.decision"  # the sweep's verdict; w and r: entry.sweep_summary
TIED_WITH_TAG = "sporeflow.tied_with"  # the jobs the best ties with; w: entry.sweep_summary
BEST_IN_SWEEP_TAG = "sporeflow.best_in_sweep"  # on a job's run; w: entry.sweep_summary
LEADER_TAG = "sporeflow.leader"  # the leader's point, or "none"; w: entry.sweep_summary
LEADER_REASON_TAG = "sporeflow.leader_reason"  # why (report.decision.lead); w: entry.sweep_summary
GAIN_BASELINE_TAG = "gain.baseline"  # the baseline a pipeline's gain is against; w: job.comparison

# How a run ended (a resume clears FAILURE_TAG and CLOSED_TAG: tracking.apply.ENDED_TAGS)
FAILURE_TAG = "sporeflow.failure"  # "Type: message"; w: job.runs.guarded, entry.sweep_run,
# entry.sweep_summary; r: report.sweep_report, tracking.apply
CLOSED_TAG = "sporeflow.closed"  # why the writer closed a run its process left; w and r:
# tracking.apply
PRUNED_TAG = "sporeflow.pruned"  # the pruner's reason (ended KILLED); w: job.runs;
# r: report.sweep_report
REQUEUES_TAG = "sporeflow.requeues"  # how often the job was requeued; w: job.runs
SELECTION_TAG = "sporeflow.selection"  # `test` on a run whose choices read the test split;
# w: stage.outputs (its own literal until that module is rewritten); r: report.sweep_report

# Reuse: a stage's fingerprint (job.specs via stage.spec.ReuseKey; r: job.reuse), a finished
# job's key (w and r: job.finished_jobs, w: job.runner), where the per-epoch step count stands
STAGE1_FINGERPRINT_TAG = "stage1_fingerprint"
BASELINE_FINGERPRINT_TAG = "baseline_fingerprint"
FINGERPRINT_CONFIG_TAG = "{}_config"  # beside a fingerprint tag: its config part alone
JOB_KEY_TAG = "sporeflow.job_key"
COPIED_FROM_TAG = "sporeflow.copied_from"  # a finished job's run copied: the original's id
STEPS_PER_EPOCH_TAG = "batch.steps_per_epoch"  # w: stage.trainer; r: job.reuse

# The tracking writer's (tracking.apply, tracking.store)
RUN_KEY_TAG = "sporeflow.run_key"  # a journal's run key; w: tracking.apply; r: tracking.store
PARENT_RUN_TAG = "mlflow.parentRunId"  # MLflow's own; w: tracking.apply; r: tracking.models,
# tracking.store_reads, entry.sweep_summary
PID_TAG = "sporeflow.pid"  # the process that records the run; w: tracking.store.process_tags
HOST_TAG = "sporeflow.host"  # w: tracking.store.process_tags
PROCESS_START_TAG = "sporeflow.process_start"  # w: tracking.store.process_tags
REGISTERED_BY_TAG = "sporeflow.registered_by"  # on a model version: the run that made it;
# w and r: tracking.models
CHECKSUM_TAG = "sha256/"  # + an artifact's path: the SHA-256 its maker recorded;
# w and r: tracking.run_files; r: entry.team_auth

# Where a run's weights came from: w: stage.fine_tune (train.init_from), entry.eval_app
INIT_FROM_TAG = "sporeflow.init_from"
INIT_WEIGHTS_TAG = "sporeflow.init_weights"
INIT_FROM_RUN_TAG = "sporeflow.init_from_run"
SOURCE_TAG = "sporeflow.source"
SOURCE_WEIGHTS_TAG = "sporeflow.weights"
SOURCE_RUN_TAG = "sporeflow.source_run"
# a checkpoint entry, not a run tag, spelled as the tags are: a network's class names (storage.checkpoints)
CLASS_NAMES_TAG = "sporeflow.class_names"


# --- a stage's per-image outcomes (stage.result writes them; pipelines, sweeps and reuse read)
PREDICTIONS = "predictions.npy"  # right/wrong per validation image: what a sweep decides on
TEST_PREDICTIONS = "test_predictions.npy"  # per test image: what a pipeline reports
