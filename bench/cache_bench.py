"""What prompt caching saves on a long tool loop (SPEC 15), measured offline.

A 50-turn tool loop (the model calls ``read_file`` 49 times, then answers) through
``Agent`` + ``AnthropicClient`` over real HTTP against ``MockMessagesServer``, whose
simulated prompt cache bills like the real API. Run once without caching and once with,
and report billed-input-token equivalents for both:

    billed = input_tokens + 0.1 * cache_read_input_tokens + 1.25 * cache_creation_input_tokens

Target: with caching <= 20% of without. Prints PASS or FAIL; exit status 1 on FAIL. The
figure is a count of tokens, not a timing: the server bills the same requests the same
way every run, so one run each way is the measure, with no rounds (#39).

    python bench/cache_bench.py [--turns 50] [--result-chars 800]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lattice import Agent, AnthropicClient, ResultMessage, tool  # noqa: E402
from lattice.query.caching import mark_cache_breakpoints  # noqa: E402
from lattice.testing.mock_server import MockMessagesServer  # noqa: E402

SYSTEM = ("You are a code reviewer. Read the files you need one at a time, then write a "
          "short review naming the riskiest change. " * 8)
RESULT_CHARS = {"n": 800}


@tool
def read_file(path: str) -> str:
    """Read one file of the repository under review."""
    line = f"{path}: def handler(request): return respond(request.body)  # reviewed\n"
    return (line * (RESULT_CHARS["n"] // len(line) + 1))[: RESULT_CHARS["n"]]


def script(turns: int) -> List[Any]:
    calls = [{"content": [
        {"type": "text", "text": f"Reading file {n}."},
        {"type": "tool_use", "name": "read_file", "input": {"path": f"src/module_{n}.py"}}]}
        for n in range(1, turns)]
    return [*calls, "The riskiest change is in module 7: it skips input validation."]


def make_agent(client: AnthropicClient, turns: int, caching: bool) -> Agent:
    options: Dict[str, Any] = dict(model="claude-bench", model_client=client, system=SYSTEM,
                                   tools=[read_file], max_turns=turns + 1)
    if not caching:
        return Agent(**options)
    try:
        return Agent(**options, prompt_caching=True)
    except (TypeError, ValueError):  # before the option exists: the same marks by hook
        return Agent(**options, on_model_request=mark_cache_breakpoints)


def run(turns: int, caching: bool) -> ResultMessage:
    with MockMessagesServer(script(turns)) as server:
        with AnthropicClient(api_key="sk-ant-bench-0123456789",
                             base_url=server.base_url) as client:
            agent = make_agent(client, turns, caching)
            result = agent.prompt("Review the change set.")
            history = agent.get_history()
    assert result.subtype == "success" and result.num_turns == turns, result
    assert "cache_control" not in repr(history), "a cache mark reached the history"
    return result


def billed(result: ResultMessage) -> float:
    u = result.usage
    return u.input_tokens + 0.1 * u.cache_read_input_tokens + 1.25 * u.cache_creation_input_tokens


TARGET = 0.20


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=50)
    parser.add_argument("--result-chars", type=int, default=800,
                        help="size of each tool result")
    args = parser.parse_args()
    RESULT_CHARS["n"] = args.result_chars
    print(f"{args.turns}-turn tool loop, tool results of {args.result_chars} chars")
    print(f"{'caching':8} {'input':>10} {'cache write':>12} {'cache read':>12} "
          f"{'billed equiv.':>14}")
    figures = {}
    for caching in (False, True):
        result = run(args.turns, caching)
        u = result.usage
        figures[caching] = billed(result)
        print(f"{'on' if caching else 'off':8} {u.input_tokens:>10} "
              f"{u.cache_creation_input_tokens:>12} {u.cache_read_input_tokens:>12} "
              f"{figures[caching]:>14.0f}")
    ratio = figures[True] / figures[False]
    passed = ratio <= TARGET
    print(f"with caching / without = {ratio:.1%}  {'PASS' if passed else 'FAIL'} "
          f"(target <= {TARGET:.0%})")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
