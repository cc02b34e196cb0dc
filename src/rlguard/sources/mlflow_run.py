"""One MLflow run: a file-store run directory or a run on a tracking server.

Two ways to name a run (``rlguard check`` takes either; so does the daemon):

* a file-store run directory, ``mlruns/<experiment_id>/<run_id>/`` (it holds ``meta.yaml``
  and ``metrics/``). Its metric files (``metrics/train/loss``: one ``timestamp value step``
  line per point) are read directly: the format is frozen (MLflow 3 keeps the file store in
  maintenance mode and its client refuses it unless ``MLFLOW_ALLOW_FILE_STORE`` is set), and
  no extra is needed.
* a run on a tracking server: ``mlflow+<tracking-uri>/runs/<run_id>``, e.g.
  ``mlflow+http://127.0.0.1:5000/runs/0a1b2c...``; the link the MLflow UI prints
  (``mlflow+http://host:5000/#/experiments/3/runs/0a1b2c...``) works too. It is read through
  ``mlflow.MlflowClient`` (``get_run``, then ``get_metric_history`` per metric key; extra
  ``rlguard[mlflow]``). Any tracking URI the client takes works (``http(s)://``, and with
  full ``mlflow`` installed ``sqlite:///...``, verl's default).

All the metrics logged at one step form one record; records are in step order, and within a
step values are applied in timestamp order (a value logged twice keeps the later). ``line``
is the record's number. MLflow keeps NaN; SQL backends store +-inf as +-1.797e308, read back
as +-inf. A server that cannot be reached, or a run it does not have, is a LogFormatError
naming the location.

Following (``follow = "whole"``): :meth:`MlflowReader.signature` is the metric files' count,
size and newest mtime for a file store, and the latest (key, step, timestamp) of each metric
plus the run status for a server (one request; kept as a digest). :func:`server_runs` lists the runs of a
server or a file store (all experiments) with their locations, for discovery.
"""
from __future__ import annotations

import hashlib
import os
import re
from contextlib import contextmanager
from itertools import groupby
from typing import Iterator

from ..core.errors import LogFormatError
from .base import LogRecord, ReadStats, Reader
from .mlflow_points import sql_float, stream

PREFIX = "mlflow+"
_RUN_ID = re.compile(r"[0-9A-Za-z_-]+")
_UI_LINK = re.compile(r"^(?P<uri>[^#]*?)/?#/experiments/[^/]+/runs/(?P<run>[^/?]+)")
_INSTALL = "reading an MLflow tracking server needs the mlflow client: pip install 'rlguard[mlflow]'"
#: how the client may fail fast (used only where the user has not set these variables)
_QUICK = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
          "MLFLOW_HTTP_REQUEST_TIMEOUT": "20"}
_RUNNING = 1  # RunStatus.RUNNING in a file store's meta.yaml


def is_location(path: str) -> bool:
    """True for an MLflow server run location (``mlflow+...``)."""
    return str(path).startswith(PREFIX)


def is_run_dir(path: str) -> bool:
    """True for a file-store run directory (``meta.yaml`` and ``metrics/`` inside)."""
    return os.path.isfile(os.path.join(path, "meta.yaml")) and os.path.isdir(os.path.join(path, "metrics"))


def parse_location(location: str) -> tuple[str, str]:
    """``(tracking_uri, run_id)`` of ``mlflow+<tracking-uri>/runs/<run_id>`` or of a UI link."""
    rest = location[len(PREFIX):] if is_location(location) else location
    link = _UI_LINK.match(rest)
    if link:
        uri, run_id = link["uri"], link["run"]
    else:
        uri, _, run_id = rest.rpartition("/runs/")
    run_id = run_id.rstrip("/")
    if not uri or not _RUN_ID.fullmatch(run_id or ""):
        raise LogFormatError("an MLflow run on a server is written mlflow+<tracking-uri>/runs/<run_id>, "
                             "e.g. mlflow+http://127.0.0.1:5000/runs/0a1b2c3d", path=location)
    return uri.rstrip("/"), run_id


def location(uri: str, run_id: str) -> str:
    """The location string of run ``run_id`` on tracking server ``uri``."""
    return f"{PREFIX}{uri.rstrip('/')}/runs/{run_id}"


class MlflowReader(Reader):
    """One MLflow run (file-store directory or server location); see the module docstring."""

    name = "mlflow"
    summary = "MLflow run: file-store dir mlruns/<exp>/<run>/ or mlflow+<tracking-uri>/runs/<run_id>"
    follow = "whole"

    @classmethod
    def sniff(cls, head: str, path: str) -> bool:
        return is_location(path)  # directories and locations are recognised before any head is read

    def records(self, path: str) -> Iterator[LogRecord]:
        self.stats = stats = ReadStats()
        path = os.fspath(path)
        if is_location(path):
            points = _server_points(path)
            points.sort(key=lambda p: (p[0], p[1]))
            stats.lines = len(points)
        else:  # streamed: memory bounded whatever the files' sizes (see .mlflow_points)
            points = stream(list(_metric_files(path)), stats)
        for n, (step, group) in enumerate(groupby(points, key=lambda p: p[0]), 1):
            stats.records += 1
            yield LogRecord(step, {key: value for _, _, key, value in group}, n)

    def signature(self, path: str) -> tuple | None:
        path = os.fspath(path)
        if not is_location(path):
            files = list(_metric_files(path))
            stats = [os.stat(full) for _, full in files]
            return (len(stats), sum(s.st_size for s in stats), max((s.st_mtime_ns for s in stats), default=0))
        uri, run_id = parse_location(path)
        with _client(uri, path) as client:
            run = client.get_run(run_id)
            latest = sorted((m.key, m.step, m.timestamp) for m in run.data.to_proto().metrics)
        digest = hashlib.sha1(repr(latest).encode()).hexdigest()[:16]
        return (run.info.status, len(latest), digest)


# ------------------------------------------------------------------ file store

def _metric_files(run_dir: str) -> Iterator[tuple[str, str]]:
    """(metric key, file path) of every metric of a file-store run (``/`` in keys = folders)."""
    if not is_run_dir(run_dir):
        raise LogFormatError("not an MLflow run directory (no meta.yaml and metrics/ in it)", path=run_dir)
    root = os.path.join(run_dir, "metrics")
    for folder, _, names in os.walk(root):
        for name in names:
            full = os.path.join(folder, name)
            yield os.path.relpath(full, root).replace(os.sep, "/"), full


def file_store_runs(root: str, active_only: bool = True) -> list[tuple[str, str]]:
    """``(run name, run directory)`` of the runs in file store ``root`` (an ``mlruns`` folder),
    all experiments, deleted ones left out; ``active_only``: only runs still RUNNING."""
    import yaml

    found = []
    for exp in sorted(_subdirs(root)):
        if _meta(exp, yaml).get("lifecycle_stage") == "deleted":
            continue
        for run_dir in sorted(_subdirs(exp)):
            meta = _meta(run_dir, yaml)
            if not meta or not is_run_dir(run_dir) or meta.get("lifecycle_stage") == "deleted":
                continue
            if active_only and meta.get("status") not in (_RUNNING, "RUNNING"):
                continue
            found.append((_run_name(run_dir, meta), run_dir))
    return _unique(found)


def _run_name(run_dir: str, meta: dict) -> str:
    name = meta.get("run_name")
    if not name:  # older stores keep it only as a tag
        try:
            with open(os.path.join(run_dir, "tags", "mlflow.runName"), encoding="utf-8") as f:
                name = f.read().strip()
        except OSError:
            pass
    return str(name or os.path.basename(run_dir))


def _subdirs(path: str) -> list[str]:
    try:
        return [e.path for e in os.scandir(path) if e.is_dir() and not e.name.startswith(".")]
    except OSError:
        return []


def _meta(folder: str, yaml) -> dict:
    try:
        with open(os.path.join(folder, "meta.yaml"), encoding="utf-8") as f:
            meta = yaml.safe_load(f)
    except (OSError, yaml.YAMLError):
        return {}
    return meta if isinstance(meta, dict) else {}


# ------------------------------------------------------------------ tracking server

@contextmanager
def _client(uri: str, where: str):
    """An ``MlflowClient`` for ``uri`` that fails fast; client and transport errors become
    LogFormatError naming ``where``."""
    try:
        from mlflow import MlflowClient
        from mlflow.exceptions import MlflowException
    except ImportError as exc:
        raise LogFormatError(f"{_INSTALL} ({exc})", path=where) from None
    added = {k: v for k, v in _QUICK.items() if k not in os.environ}
    os.environ.update(added)
    try:
        yield MlflowClient(tracking_uri=uri)
    except MlflowException as exc:
        raise LogFormatError(_message(exc, uri), path=where) from None
    except (OSError, ImportError) as exc:
        raise LogFormatError(f"MLflow tracking URI {uri}: {exc}", path=where) from None
    finally:
        for k in added:
            os.environ.pop(k, None)


def _message(exc, uri: str) -> str:
    text = str(getattr(exc, "message", exc)).strip().splitlines()[0]
    code = getattr(exc, "error_code", "")
    if code == "RESOURCE_DOES_NOT_EXIST":
        return f"no such run on the MLflow tracking server {uri}: {text}"
    if "Max retries exceeded" in text or "Connection" in text:
        return f"cannot reach the MLflow tracking server {uri}: {text}"
    return f"MLflow tracking server {uri}: {text}"


def _reachable(uri: str, where: str) -> None:
    """Fail at once, with the URI, when an http(s) server does not answer (the client would
    retry for a while before saying so) or a SQLite store is not there (the client would
    create an empty one)."""
    if uri.startswith("sqlite:///"):
        db = uri[len("sqlite:///"):]
        if db != ":memory:" and not os.path.isfile(db):
            raise LogFormatError(f"no MLflow SQLite store at {db} (tracking URI {uri})", path=where)
        return
    if not uri.startswith(("http://", "https://")):
        return
    import urllib.error
    import urllib.request

    try:
        urllib.request.urlopen(uri + "/health", timeout=10).close()  # noqa: S310 - the user's URI
    except urllib.error.HTTPError:
        pass  # it answers (a proxy or an old server without /health): let the client speak
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise LogFormatError(f"cannot reach the MLflow tracking server {uri}: {reason}", path=where) from None


def _server_points(where: str) -> list[tuple[int, int, str, float]]:
    uri, run_id = parse_location(where)
    _reachable(uri, where)
    with _client(uri, where) as client:
        keys = sorted(client.get_run(run_id).data.metrics)
        return [(m.step, m.timestamp, key, sql_float(m.value))
                for key in keys for m in client.get_metric_history(run_id, key)]


def server_runs(uri: str, active_only: bool = True) -> list[tuple[str, str]]:
    """``(run name, location)`` of the runs of tracking server ``uri`` (all experiments,
    deleted ones left out; ``active_only``: only runs still RUNNING), for ``rlguard check``
    or the daemon to follow. ``uri`` may also be a file store (an ``mlruns`` folder or a
    ``file:`` URI): the locations are then run directories. Names are the run names, made
    unique with the run id's start where two runs share one."""
    if uri.startswith("file:") or os.path.isdir(uri):
        root = uri[len("file:"):] if uri.startswith("file:") else uri
        return file_store_runs(root.removeprefix("//"), active_only)
    uri = uri[len(PREFIX):] if is_location(uri) else uri
    _reachable(uri.rstrip("/"), uri)
    with _client(uri, uri) as client:
        from mlflow.entities import ViewType

        exps = _pages(lambda tok: client.search_experiments(view_type=ViewType.ACTIVE_ONLY, page_token=tok))
        if not exps:
            return []
        flt = "attributes.status = 'RUNNING'" if active_only else ""
        runs = _pages(lambda tok: client.search_runs([e.experiment_id for e in exps], flt,
                                                     run_view_type=ViewType.ACTIVE_ONLY, page_token=tok))
    return _unique([(r.info.run_name or r.info.run_id, location(uri, r.info.run_id)) for r in runs])


def _pages(fetch) -> list:
    out, token = [], None
    while True:
        page = fetch(token)
        out.extend(page)
        token = getattr(page, "token", None)
        if not token:
            return out


def _unique(runs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    names = [name for name, _ in runs]
    return [(f"{name}-{loc.rstrip('/').rsplit('/', 1)[-1][:8]}" if names.count(name) > 1 else name, loc)
            for name, loc in runs]


def run_title(run: str) -> str | None:
    """The run name of an MLflow run: a file-store run directory (its ``meta.yaml``, else the
    ``mlflow.runName`` tag) or a server location (``mlflow+<uri>/runs/<id>``); None when it
    has none or the server does not say."""
    if is_location(run):
        try:
            uri, run_id = parse_location(run)
            with _client(uri, run) as client:
                return client.get_run(run_id).info.run_name or None
        except (LogFormatError, ValueError):
            return None
    import yaml

    meta = _meta(run, yaml)
    name = _run_name(run, meta) if meta else None
    return name if name and name != os.path.basename(run) else None
