"""The team server's login check: MLflow's basic auth, plus two rules MLflow's permissions lack.

MLflow lets every user who logs in create experiments and registered models, and makes the
creator their manager. A viewer could so create the team's experiment before anyone trained
into it, and later replace a trainer's weights in it, digest tag included (issue 52). So:

1. Only the admin and users with the trainer role create what MLflow makes its creator manage
   (experiments, registered models and prompts, scorers, gateway objects): the requests whose
   MLflow after-request handler grants MANAGE, read from MLflow's own table, so a kind of
   object a later MLflow adds is covered as well.
2. A recorded SHA-256 (`sha256/<artifact>` tag) is written once: the same value again is
   accepted (a journal replayed), another value or deleting it is refused, for everyone.
   Whoever may write a run's artifact may so not also make a replaced file look like the one
   the run made: a machine that fetches it finds the mismatch (job/reuse.py).

MLflow calls `authenticate_request` (named as `authorization_function` in the auth app's
basic_auth.ini, which `sporeflow server` writes) before every request, in Flask's request
context; a Response it returns is sent instead of serving the request.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from sporeflow.core.names import CHECKSUM_TAG

TRAINER_ROLE = "sporeflow-trainer"  # EDIT on every experiment and registered model
TAG_WRITES = ("/mlflow/runs/set-tag", "/mlflow/runs/log-batch", "/mlflow/runs/delete-tag")


def authenticate_request() -> Any:
    """MLflow's basic-auth answer for this request, or a 403 when it breaks a rule above."""
    from flask import request
    from mlflow.server import auth

    who = auth.authenticate_request_basic_auth()
    if not isinstance(who, auth.Authorization):
        return who  # 401: no or a wrong login
    if creates(request.path, request.method) and not may_create(who.username):
        return forbidden(
            f"user {who.username!r} may read but not create experiments or models on this "
            f"server: the admin creates them, or gives the user the {TRAINER_ROLE} role "
            "(`sporeflow server add-user`)"
        )
    changed = rewritten_digest(request.path, request.method, body(request))
    if changed:
        return forbidden(
            f"{changed}: a recorded SHA-256 is written once; a run's files are checked "
            "against it on every machine that fetches them"
        )
    return who


@functools.cache
def creating_requests() -> tuple[frozenset[tuple[str, str]], tuple[tuple[Any, str], ...]]:
    """(path, method) pairs, and (path pattern, method) pairs, of the requests after which
    MLflow grants the requester MANAGE on what it made."""
    from mlflow.server import auth

    def grants(handler) -> bool:
        return getattr(handler, "__name__", "").startswith("set_can_manage")

    exact = frozenset(
        key for key, handler in auth.AFTER_REQUEST_HANDLERS.items() if grants(handler)
    )
    patterns = tuple(
        key for key, handler in auth.PARAMETERIZED_AFTER_REQUEST_HANDLERS.items() if grants(handler)
    )
    return exact, patterns


def creates(path: str, method: str) -> bool:
    """Whether a request makes an object whose maker MLflow makes its manager."""
    exact, patterns = creating_requests()
    return (path, method) in exact or any(
        m == method and pattern.fullmatch(path) for pattern, m in patterns
    )


def may_create(username: str) -> bool:
    """The admin, and users holding the trainer role (in any workspace)."""
    from mlflow.server import auth

    user = auth.store.get_user(username)
    return user.is_admin or any(r.name == TRAINER_ROLE for r in auth.store.list_user_roles(user.id))


def body(request) -> dict:
    """The request's JSON body ({} when it has none: a GET, or MLflow's FastAPI routes)."""
    if request.method != "POST":
        return {}
    found = request.get_json(silent=True)
    return found if isinstance(found, dict) else {}


def rewritten_digest(path: str, method: str, payload: dict) -> str | None:
    """'<tag> of run <id>' when the request deletes a recorded digest or sets it to another
    value, else None."""
    if method != "POST" or not path.endswith(TAG_WRITES):
        return None
    run_id = payload.get("run_id") or payload.get("run_uuid") or ""
    if path.endswith("/log-batch"):
        wanted = {
            t.get("key"): t.get("value") for t in payload.get("tags") or [] if isinstance(t, dict)
        }
    else:
        wanted = {payload.get("key"): None if path.endswith("delete-tag") else payload.get("value")}
    digests = {k: v for k, v in wanted.items() if isinstance(k, str) and k.startswith(CHECKSUM_TAG)}
    if not digests or not run_id:
        return None
    recorded = recorded_tags(run_id)
    for key, value in digests.items():
        if key in recorded and recorded[key] != value:
            return f"{key} of run {run_id}"
    return None


def recorded_tags(run_id: str) -> dict[str, str]:
    """The run's tags as the store has them ({} for a run it does not have: MLflow's own
    handler answers that request)."""
    from mlflow.exceptions import MlflowException
    from mlflow.server.handlers import _get_tracking_store

    try:
        return dict(_get_tracking_store().get_run(run_id).data.tags)
    except MlflowException:
        return {}


def forbidden(message: str):
    """A 403 in MLflow's error shape, which its clients show with the message."""
    from flask import make_response

    answer = make_response(json.dumps({"error_code": "PERMISSION_DENIED", "message": message}))
    answer.status_code = 403
    answer.content_type = "application/json"
    return answer
