"""``lattice runs --session FILE.jsonl [RUN_ID]``: the durable runs a session file records.

Without a run id, one line per run, oldest first: its id, state (an ended run's result
subtype), when it started (UTC) and the start of its prompt. With a run id, that run: its
state, times, prompt and result (``--json``: the stored record as JSON). Reads only: a
missing file is an error, never created.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, Dict, List, TextIO

from ..errors import HistoryStoreError
from ..stores import create_jsonl_history_store

__all__ = ["show_runs"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def _when(seconds: Any) -> str:
    if not isinstance(seconds, (int, float)):
        return "?"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(seconds))


def _state(record: Dict[str, Any]) -> str:
    result = record.get("result")
    if record.get("state") == "ended" and isinstance(result, dict):
        return f"ended ({result.get('subtype', '?')})"
    return str(record.get("state", "?"))


def _short(text: Any, width: int = 60) -> str:
    line = " ".join(str(text if text is not None else "(approvals)").split())
    return line if len(line) <= width else line[:width - 1] + "…"


def show_runs(session: str, run_ids: List[str], *, as_json: bool, out: TextIO,
              err: TextIO) -> int:
    """List the runs of ``session`` (a JSONL file), or show the one of ``run_ids``."""
    if len(run_ids) > 1:
        err.write("lattice: runs takes at most one RUN_ID\n")
        return EXIT_USAGE
    if not os.path.isfile(session):
        err.write(f"lattice: --session {session}: no such session file\n")
        return EXIT_USAGE
    store = create_jsonl_history_store(session, fail_on_error=True)
    try:
        if run_ids:
            record = store.load_run(run_ids[0])
            if record is None:
                err.write(f"lattice: no run {run_ids[0]!r} in {session} "
                          f"('lattice runs --session {session}' lists them)\n")
                return EXIT_FAILED
            _show(record, as_json, out)
            return EXIT_OK
        records = store.list_runs()
    except (HistoryStoreError, OSError, ValueError) as exc:
        err.write(f"lattice: --session {session}: {exc}\n")
        return EXIT_FAILED
    finally:
        store.close()
    if as_json:
        out.write(json.dumps(records, indent=2, ensure_ascii=False) + "\n")
    elif not records:
        out.write(f"no runs in {session} (a run is a prompt given a run id)\n")
    for record in records if not as_json else ():
        out.write(f"{record.get('run_id')}  {_state(record):<22} "
                  f"{_when(record.get('started_at'))}  {_short(record.get('prompt'))}\n")
    return EXIT_OK


def _show(record: Dict[str, Any], as_json: bool, out: TextIO) -> None:
    if as_json:
        out.write(json.dumps(record, indent=2, ensure_ascii=False) + "\n")
        return
    lines = [("run", record.get("run_id")), ("state", _state(record)),
             ("started", _when(record.get("started_at")) + " UTC"),
             ("updated", _when(record.get("updated_at")) + " UTC"),
             ("prompt", _short(record.get("prompt"), 200))]
    result = record.get("result")
    if isinstance(result, dict):
        lines += [("turns", result.get("num_turns")), ("result", _short(result.get("result"), 200))]
        pending = result.get("pending_approval_ids") or []
        if pending:
            lines.append(("awaiting", ", ".join(map(str, pending))))
    for name, value in lines:
        out.write(f"{name + ':':<9} {value}\n")
