"""JsonlHistoryStore across real processes: resume, kill -9, concurrent writers, replace."""

import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import lattice
from lattice import (
    JsonlHistoryStore,
)

pytestmark = [pytest.mark.skipif(os.name == "nt", reason="POSIX processes and signals"),
              pytest.mark.slow]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(lattice.__file__)))


def child(code, *args, **popen):
    """Start ``python -c code args...`` with lattice importable."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *map(str, args)],
        env=env, stdout=subprocess.PIPE, text=True, **popen)


def run(code, *args):
    proc = child(code, *args)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    return out


def test_resume_in_a_second_process(tmp_path):
    path = tmp_path / "s" / "h.jsonl"
    run("""
        import sys
        from lattice.stores import JsonlHistoryStore
        store = JsonlHistoryStore(sys.argv[1])
        store.append({"role": "user", "content": "My name is Ada."})
        store.append({"role": "assistant", "content": [{"type": "text", "text": "Hi Ada"}]})
    """, path)
    out = run("""
        import json, sys
        from lattice.stores import JsonlHistoryStore
        store = JsonlHistoryStore(sys.argv[1])
        print(json.dumps(store.load()))
        store.append({"role": "user", "content": "What is my name?"})
    """, path)
    assert json.loads(out) == [
        {"role": "user", "content": "My name is Ada."},
        {"role": "assistant", "content": [{"type": "text", "text": "Hi Ada"}]},
    ]
    assert [m["content"] for m in JsonlHistoryStore(path).load()][-1] == "What is my name?"


APPEND_FOREVER = """
    import os, sys
    from lattice.stores import JsonlHistoryStore
    store = JsonlHistoryStore(sys.argv[1])
    tag, size = sys.argv[2], int(sys.argv[3])
    i = 0
    while True:
        store.append({"role": "user", "content": "", "tag": tag, "i": i, "pad": tag * size})
        os.write(1, b"%d\\n" % i)  # acknowledged: the append returned
        i += 1
"""


def test_kill_9_mid_append_loses_at_most_the_last_line(tmp_path, caplog):
    path = tmp_path / "h.jsonl"
    store = JsonlHistoryStore(path)
    torn = 0
    # 4 MB lines: the kernel copies for long enough that a kill often lands mid-write
    # (a write cut by SIGKILL leaves a partial line, like a crash).
    for round_, tag in enumerate("abcde"):
        proc = child(APPEND_FOREVER, path, tag, 1 << 22)
        acked = int(proc.stdout.readline())
        time.sleep(0.004 * round_)  # a different moment to kill at each round: not a wait
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        rest = proc.stdout.read().split()
        proc.stdout.close()
        acked = int(rest[-1]) if rest else acked
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="lattice"):
            loaded = store.load()
        torn += "corrupt" in caplog.text
        mine = [m for m in loaded if m["tag"] == tag]
        # Every acknowledged append is there, whole; at most the one in flight is lost.
        assert [m["i"] for m in mine] == list(range(len(mine)))
        assert acked + 1 <= len(mine) <= acked + 2
        assert all(m["pad"] == tag * (1 << 22) for m in mine)
        # The next append (the next round's child, or us) starts on a fresh line.
        store.append({"role": "user", "content": "", "tag": "after", "i": round_, "pad": ""})
        assert store.load()[-1] == {"role": "user", "content": "", "tag": "after", "i": round_, "pad": ""}
    assert [m["i"] for m in store.load() if m["tag"] == "after"] == list(range(5))
    print(f"rounds that left a torn line: {torn} of 5")
    os.unlink(path)  # do not keep ~100 MB in pytest's temp folders


def test_a_short_write_from_the_kernel_is_reported_and_recovered(tmp_path, caplog):
    path = tmp_path / "h.jsonl"
    out = run("""
        import resource, signal, sys
        from lattice.stores import JsonlHistoryStore
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        store = JsonlHistoryStore(sys.argv[1])
        store.append({"role": "user", "content": "x" * 1000})
        resource.setrlimit(resource.RLIMIT_FSIZE, (1500, 1500))  # the disk "fills up"
        try:
            store.append({"role": "user", "content": "y" * 1000})
        except OSError as exc:
            print("OSError", exc)
    """, path)
    assert out.startswith("OSError") and "short write" in out
    assert 1000 < path.stat().st_size <= 1500  # a torn line really is there
    store = JsonlHistoryStore(path)
    with caplog.at_level(logging.WARNING, logger="lattice"):
        assert store.load() == [{"role": "user", "content": "x" * 1000}]
    assert "skipped 1 corrupt line(s)" in caplog.text
    store.append({"role": "user", "content": "z"})
    assert [m["content"][0] for m in store.load()] == ["x", "z"]


def test_four_processes_appending_64kb_lines_never_interleave(tmp_path):
    path = tmp_path / "h.jsonl"
    go = tmp_path / "go"
    per_writer = 60
    # Halfway through, each writer waits until every writer is halfway: all four are
    # writing at once even on a loaded machine (where one could otherwise write all its
    # lines in one time slice), and no writer's lines can form one unbroken block.
    code = """
        import os, sys, time
        from lattice.stores import JsonlHistoryStore
        path, go, tag, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
        store = JsonlHistoryStore(path)
        halfway = os.path.join(os.path.dirname(go), "half-")
        print("ready", flush=True)
        while not os.path.exists(go):  # start together
            time.sleep(0.001)
        for i in range(count):
            if i == count // 2:
                open(halfway + tag, "w").close()
                while not all(os.path.exists(halfway + t) for t in "wxyz"):
                    time.sleep(0.001)
            store.append({"role": "user", "content": "", "tag": tag, "i": i, "pad": tag * 65536})
    """
    procs = [child(code, path, go, tag, per_writer) for tag in "wxyz"]
    for proc in procs:  # every writer has started and waits for the go
        assert proc.stdout.readline().strip() == "ready"
    go.touch()
    for proc in procs:
        assert proc.wait(60) == 0
        proc.stdout.close()
    raw = path.read_bytes()
    lines = raw.split(b"\n")
    assert lines[-1] == b""
    parsed = [json.loads(line) for line in lines[:-1]]  # every line is whole
    assert len(parsed) == 4 * per_writer
    for tag in "wxyz":
        mine = [m for m in parsed if m["tag"] == tag]
        assert [m["i"] for m in mine] == list(range(per_writer))
        assert all(m["pad"] == tag * 65536 for m in mine)
    # Writers interleaved, i.e. really ran at the same time.
    assert len({m["tag"] for m in parsed[: per_writer]}) > 1
    runs = 1 + sum(a["tag"] != b["tag"] for a, b in zip(parsed, parsed[1:]))
    assert runs > 4


def test_appends_after_a_replace_from_another_process_are_kept(tmp_path):
    """The child caches a descriptor on the old file; our replace swaps the inode."""
    path = tmp_path / "h.jsonl"
    proc = child("""
        import sys
        from lattice.stores import JsonlHistoryStore
        store = JsonlHistoryStore(sys.argv[1])
        for i in range(5):
            store.append({"role": "user", "content": f"before {i}"})
        print("ready", flush=True)
        sys.stdin.readline()
        for i in range(5):
            store.append({"role": "user", "content": f"after {i}"})
    """, path, stdin=subprocess.PIPE)
    assert proc.stdout.readline().strip() == "ready"
    store = JsonlHistoryStore(path)
    store.replace([{"role": "user", "content": "summary"}])
    proc.stdin.write("go\n")
    proc.stdin.close()
    assert proc.wait(30) == 0
    proc.stdout.close()
    assert [m["content"] for m in store.load()] == ["summary"] + [f"after {i}" for i in range(5)]


def test_replace_racing_an_appender_loses_nothing_after_it(tmp_path):
    path = tmp_path / "h.jsonl"
    stop = tmp_path / "stop"
    proc = child("""
        import os, sys
        from lattice.stores import JsonlHistoryStore
        store = JsonlHistoryStore(sys.argv[1])
        i = 0
        while not os.path.exists(sys.argv[2]):
            store.append({"role": "user", "content": "", "i": i, "pad": "x" * 2000})
            if i == 0:
                print("started", flush=True)
            i += 1
        print(i, flush=True)
    """, path, stop)
    assert proc.stdout.readline().strip() == "started"
    store = JsonlHistoryStore(path)
    for k in range(40):
        store.replace([{"role": "user", "content": "summary", "summary": k}])
        time.sleep(0.002)
    # Let the child append a few lines after the last replace (however busy the machine).
    deadline = time.monotonic() + 30
    while len(store.load()) < 4 and time.monotonic() < deadline:
        time.sleep(0.005)
    stop.touch()
    total = int(proc.stdout.readline())
    assert proc.wait(30) == 0
    proc.stdout.close()
    loaded = store.load()
    assert loaded[0] == {"role": "user", "content": "summary", "summary": 39}
    tail = [m["i"] for m in loaded[1:]]
    # Everything the child appended after the last replace is there, in order, with no
    # gap: an append into the replaced (unlinked) file would leave one.
    assert tail and tail == list(range(tail[0], total))
    assert sorted(os.listdir(tmp_path)) == ["h.jsonl", "h.jsonl.lock", "stop"]


# -- SPEC 8 conformance ----------------------------------------------------------------------


def test_jsonl_concurrent_appends_from_processes_never_interleave(tmp_path):
    import subprocess
    import sys

    path = tmp_path / "shared.jsonl"
    code = ("import sys\nfrom lattice import JsonlHistoryStore\n"
            "s = JsonlHistoryStore(sys.argv[1])\n"
            "for i in range(150):\n"
            "    s.append({'role': 'user', 'content': sys.argv[2] * 300 + str(i)})\n")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(path), tag]) for tag in "abc"]
    for p in procs:
        assert p.wait(60) == 0
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    assert len(lines) == 450
    for line in lines:
        message = json.loads(line)
        assert len(set(message["content"].rstrip("0123456789"))) == 1
    assert len(JsonlHistoryStore(path).load()) == 450
