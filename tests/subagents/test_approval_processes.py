"""SPEC 22: approval bubbles up across processes, as section 12's does: one process pauses
the parent on a child's call, another lists it (with its path) and resumes with
``approvals=``; the call runs once, in the second process."""

import json
import os

from store_kinds import child


def run(code, *args):
    proc = child(code, *args)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    return out.strip().splitlines()[-1]


def test_a_childs_approval_is_resumed_by_another_process(tmp_path):
    path, log = tmp_path / "h.db", tmp_path / "paid.log"
    first = run("""
        import sys
        sys.path.insert(0, sys.argv[3])
        from approval_world import parent
        result = parent(sys.argv[1], sys.argv[2]).prompt("go")
        print(result.subtype, [(c.id, c.path) for c in result.pending_approvals])
    """, path, log, os.path.dirname(__file__))
    assert first == "awaiting_approval [('c1', ['d1', 'c1'])]"
    second = run("""
        import sys
        sys.path.insert(0, sys.argv[3])
        from approval_world import parent
        agent = parent(sys.argv[1], sys.argv[2])
        pending = agent.pending_approvals()
        result = agent.prompt(approvals={c.id: True for c in pending})
        print([(c.id, c.path) for c in pending], result.subtype, result.result)
    """, path, log, os.path.dirname(__file__))
    assert second == "[('c1', ['d1', 'c1'])] success parent saw: child saw: paid 5"
    paid = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(paid) == 1 and paid[0][1] == 5
