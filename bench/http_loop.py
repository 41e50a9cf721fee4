"""Per-turn overhead of a tool loop through ``lattice.Agent`` + ``AnthropicClient``.

A local ``MockMessagesServer`` (in a child process, so it does not share our GIL) asks
for one tool call per turn until turn N, then answers with text. We time

* lattice: ``Agent(model_client=AnthropicClient(...), tools=[echo]).prompt(...)``, and
  the same query iterated through ``agent.query(...)``;
* bare: a ``requests.Session().post`` loop that sends the same growing bodies (same
  messages, tool definition and max_tokens) and reads the same replies. Its session is
  configured as lattice's own (``trust_env = False``: requests otherwise walks the
  environment for proxy settings on every call, 20-30% of a local round trip),

at N = 50 and N = 500, with JSON replies and with SSE streaming (the client's default;
the bare loop then reads lines with ``iter_lines`` + ``json.loads`` and assembles the
reply itself). Runs alternate between the three (order rotated each round); each figure
is the median of its runs. Target: lattice within 1.2x of bare.

    python bench/http_loop.py [--reps 6] [--turns 50 500]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import requests  # noqa: E402

import lattice  # noqa: E402
from lattice.testing.mock_server import MockMessagesServer  # noqa: E402

KEY = "sk-ant-bench-0123456789"
MODEL = "claude-bench"
TURNS = {"n": 50}


def script(body: Dict[str, Any]) -> Any:
    """Tool call on every turn below N (turn = assistant messages so far + 1), then text."""
    turn = sum(1 for m in body["messages"] if m["role"] == "assistant") + 1
    if turn < TURNS["n"]:
        return {"content": [
            {"type": "text", "text": f"Step {turn}: calling the tool."},
            {"type": "tool_use", "id": f"toolu_{turn:05d}", "name": "echo",
             "input": {"text": f"payload for step {turn}"}}]}
    return f"All {turn} steps done."


def _serve(conn: Any) -> None:
    with MockMessagesServer(record=False) as server:
        server.add(*[_Dispatch()] * 1_000_000)
        conn.send(server.base_url)
        while True:
            message = conn.recv()
            if message == "stop":
                return
            TURNS["n"] = message
            conn.send("ok")


class _Dispatch:
    def __call__(self, body: Dict[str, Any]) -> Any:
        return script(body)


@contextlib.contextmanager
def server_process() -> Iterator[Callable[[int], str]]:
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    process = ctx.Process(target=_serve, args=(child,), daemon=True)
    process.start()
    url = parent.recv()

    def with_turns(n: int) -> str:
        parent.send(n)
        parent.recv()
        return str(url)

    try:
        yield with_turns
    finally:
        parent.send("stop")
        process.join(10)


@lattice.tool
def echo(text: str) -> str:
    """Return the text unchanged.

    Args:
        text: what to return.
    """
    return text


def lattice_loop(url: str, turns: int, stream: bool, iterate: bool = False) -> None:
    """One query through ``prompt()``, or through ``query()`` when ``iterate``."""
    client = lattice.AnthropicClient(KEY, url, stream=stream)
    agent = lattice.Agent(model=MODEL, model_client=client, tools=[echo], max_turns=turns + 1)
    if iterate:
        result: Any = None
        for result in agent.query("Run the steps."):
            pass
    else:
        result = agent.prompt("Run the steps.")
    assert result.subtype == "success" and result.num_turns == turns, result
    client.close()


def _read_sse(response: requests.Response) -> Dict[str, Any]:
    blocks: List[Dict[str, Any]] = []
    partial: Dict[int, List[str]] = {}
    stop_reason = None
    for line in response.iter_lines(chunk_size=1 << 16):
        if not line.startswith(b"data:"):
            continue
        event = json.loads(line[5:])
        kind = event["type"]
        if kind == "content_block_start":
            blocks.append(dict(event["content_block"]))
        elif kind == "content_block_delta":
            delta = event["delta"]
            if delta["type"] == "text_delta":
                blocks[event["index"]]["text"] += delta["text"]
            elif delta["type"] == "input_json_delta":
                partial.setdefault(event["index"], []).append(delta["partial_json"])
        elif kind == "message_delta":
            stop_reason = event["delta"]["stop_reason"]
    for index, parts in partial.items():
        blocks[index]["input"] = json.loads("".join(parts) or "{}")
    return {"content": blocks, "stop_reason": stop_reason}


def bare_loop(url: str, turns: int, stream: bool, tools: List[Dict[str, Any]]) -> None:
    session = requests.Session()
    session.trust_env = False  # as lattice's own session: no environment walk per call
    headers = {"x-api-key": KEY, "anthropic-version": "2023-06-01",
               "content-type": "application/json"}
    messages: List[Dict[str, Any]] = [{"role": "user", "content": "Run the steps."}]
    for turn in range(1, turns + 1):
        body: Dict[str, Any] = {"model": MODEL, "max_tokens": 8192, "messages": messages,
                                "tools": tools}
        if stream:
            body["stream"] = True
        data = json.dumps(body, separators=(",", ":")).encode()
        if stream:
            with session.post(url + "/v1/messages", data=data, headers=headers,
                              stream=True) as response:
                reply = _read_sse(response)
        else:
            reply = session.post(url + "/v1/messages", data=data, headers=headers).json()
        messages.append({"role": "assistant", "content": reply["content"]})
        uses = [b for b in reply["content"] if b["type"] == "tool_use"]
        if not uses:
            assert turn == turns, turn
            break
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": u["id"], "content": u["input"]["text"]}
            for u in uses]})
    session.close()


def compare(fns: List[Callable[[], None]], reps: int) -> List[float]:
    """Median time of each over ``reps`` interleaved rounds (order rotated each round)."""
    for fn in fns:
        fn()  # warm up (connections, caches)
    times: List[List[float]] = [[] for _ in fns]
    for rep in range(reps):
        for slot in [(rep + i) % len(fns) for i in range(len(fns))]:
            started = time.perf_counter()
            fns[slot]()
            times[slot].append(time.perf_counter() - started)
    return [statistics.median(t) for t in times]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=6)
    parser.add_argument("--turns", type=int, nargs="+", default=[50, 500])
    args = parser.parse_args()
    tools = [{"name": echo.name, "description": echo.description,
              "input_schema": echo.input_schema}]
    rows = []
    worst = 0.0
    with server_process() as server:
        for turns in args.turns:
            url = server(turns)
            reps = args.reps if turns <= 100 else max(3, args.reps // 2)
            for stream in (False, True):
                bare, ours, iterated = compare([
                    lambda: bare_loop(url, turns, stream, tools),
                    lambda: lattice_loop(url, turns, stream),
                    lambda: lattice_loop(url, turns, stream, iterate=True)], reps)
                worst = max(worst, ours / bare, iterated / bare)
                rows.append([str(turns), "SSE" if stream else "JSON",
                             f"{bare * 1e3:9.1f} ms", f"{ours * 1e3:9.1f} ms",
                             f"{iterated * 1e3:9.1f} ms",
                             f"{bare / turns * 1e3:6.2f} ms", f"{ours / turns * 1e3:6.2f} ms",
                             f"{(ours - bare) / turns * 1e6:+7.0f} us",
                             f"{ours / bare:.2f}x", f"{iterated / bare:.2f}x"])
    header = ["turns", "replies", "bare loop", "prompt()", "query()", "bare/turn",
              "prompt/turn", "overhead/turn", "prompt ratio", "query ratio"]
    widths = [max(len(r[i]) for r in rows + [header]) for i in range(len(header))]
    for row in [header, ["-" * w for w in widths]] + rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)))
    verdict = "PASS" if worst <= 1.2 else "FAIL"
    print(f"\nmedian of {args.reps} interleaved runs (500 turns: {max(3, args.reps // 2)}); "
          f"worst ratio: {worst:.2f}x (target <= 1.2x): {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
