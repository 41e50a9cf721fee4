"""What the production toolkit's wrappers add per turn, in CPU instructions (valgrind).

Each figure is the difference between a 50- and a 300-turn ``prompt()`` tool loop divided
by 250 (20 and 80 for the replay, whose cassette grows with the square of its turns):
interpreter start-up and imports cancel out. Each run is made once unmeasured first (so
no module is compiled inside a measure), then counted by callgrind, which does not
move with the load of a shared machine (``instructions.py`` explains why wall-clock time
is no judge here). The model client is ``instructions.py``'s plain object whose ``create``
returns the reply (naming its model, as every built-in client's reply does), so no test
double's checks are counted.

* **fallback, happy path**: ``FallbackModelClient([client, other])`` whose first client
  answers every time / the bare client. Target (issue 38): <= 1.02.
* **replay per turn**: a ``Replayer`` answering the same loop from a cassette recorded
  beforehand (``match="body"``: each request compared with the recorded one, the whole
  history each turn, as a check must) / the bare client, the cassette's reading left out
  (a run that only loads it is subtracted) and printed on its own line; for the record,
  no target. Measured 2026-12-07: fallback 1.004-1.018 (four runs), replay ~2.7-2.8, reading
  ~0.6 (it was 8.7 before a cassette kept only each turn's new messages).

    python bench/toolkit_bench.py
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict

sys.path.insert(0, str(Path(__file__).resolve().parent))
from instructions import counted  # noqa: E402 - bench/ is not a package

TREE = Path(__file__).resolve().parents[1]
SIZES = {"bare": (50, 300), "fallback": (50, 300), "replay": (20, 80), "load": (20, 80)}
TARGET = 1.02


def make_model(turns: int) -> Any:
    class Model:
        def create(self, request: Any) -> Dict[str, Any]:
            k = (len(request.messages) + 1) // 2
            usage = {"input_tokens": 10, "output_tokens": 2}
            # "model": every built-in client's reply names the model that answered
            if k >= turns:
                return {"content": [{"type": "text", "text": "finished"}],
                        "stop_reason": "end_turn", "usage": usage, "model": "bench"}
            return {"content": [{"type": "tool_use", "id": f"toolu_{k}", "name": "step",
                                 "input": {"n": k}}], "stop_reason": "tool_use",
                    "usage": usage, "model": "bench"}

    return Model()


def workload(kind: str, size: int, cassette: str) -> None:
    sys.path.insert(0, str(TREE))
    from lattice import Agent, tool
    from lattice.models.fallback import FallbackModelClient
    from lattice.testing import Recorder, Replayer

    @tool
    def step(n: int) -> str:
        """Advance one step."""
        return f"step {n} done"

    client: Any = make_model(size)
    if kind == "fallback":
        client = FallbackModelClient([client, make_model(size)])
    elif kind == "record":
        client = Recorder(client, cassette)
    elif kind in ("replay", "load"):
        client = Replayer(cassette)
        if kind == "load":
            return  # the cassette read, no turn run: subtracted from "replay"
    Agent(model="bench", model_client=client, tools=[step], max_turns=size + 1).prompt("go")


def per_turn(kind: str, cassettes: Dict[int, str]) -> float:
    small, large = SIZES[kind]
    for size in (small, large):  # once unmeasured: no module compiled inside a measure
        subprocess.run([sys.executable, __file__, "--worker", kind, str(size),
                        cassettes.get(size, "")], check=True)
    runs = {size: counted([__file__, "--worker", kind, str(size), cassettes.get(size, "")])
            for size in (small, large)}
    return (runs[large] - runs[small]) / (large - small)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        kind, size, cassette = args.worker
        workload(kind, int(size), cassette)
        return 0
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (apt-get install valgrind): nothing measured")
        return 2
    with tempfile.TemporaryDirectory() as folder:
        cassettes = {size: str(Path(folder) / f"{size}.json") for size in SIZES["replay"]}
        for size, path in cassettes.items():
            workload("record", size, path)  # the cassettes the replay answers from
        bare = per_turn("bare", cassettes)
        fallback = per_turn("fallback", cassettes)
        load = per_turn("load", cassettes)
        replay = per_turn("replay", cassettes) - load
    ok = fallback / bare <= TARGET
    print("instructions per turn (valgrind): the difference of two prompt() loops "
          f"({SIZES['bare']} turns; replay {SIZES['replay']}) / the difference in turns")
    print(f"{'measure':34} {'per turn':>10} {'/ bare':>8}")
    print(f"{'bare client':34} {bare:10.0f} {1:8.3f}")
    print(f"{'FallbackModelClient, happy path':34} {fallback:10.0f} {fallback / bare:8.3f}"
          f"  {'PASS' if ok else 'FAIL'} (target <= {TARGET})")
    print(f"{'Replayer (match=body), loaded':34} {replay:10.0f} {replay / bare:8.3f}  None "
          "(printed, not judged)")
    print(f"{'  + reading its cassette':34} {load:10.0f} {load / bare:8.3f}  None "
          "(printed, not judged)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
