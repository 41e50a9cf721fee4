"""Round trip of a trivial ``tools/call`` over stdio: lattice.mcp vs the official ``mcp``
SDK client, against the same server, in the same run.

Each client starts its own copy of the server, by default of both servers in turn (issue
28: not only lattice's own): ``examples/_mcp_echo_server.py``, a small hand-written
server, and tests/mcp/sdk_server.py, built with the SDK (``--server echo|sdk`` for one);
it warms up, then makes N sequential ``echo`` calls; the rounds alternate between
the clients so drift on a shared machine hits both alike (7 rounds unless ``--rounds``).
Reported: µs per call for each client and the ratio lattice / SDK taken within each round
(below 1: lattice is faster), each as the median over rounds with its min-max. Target
(issue 16): lattice not slower, median ratio <= 1, on each server (PASS/FAIL each; exit
status 1 if any fails). With fewer than 5 rounds the ratios are shown, not judged (#39).

    python bench/mcp_bench.py [--calls 2000] [--rounds 7] [--server both|echo|sdk]

``--oauth``: instead, an OAuth-protected ``tools/call`` over Streamable HTTP against the
same local server unprotected (tests/mcp/oauth_fixture.py), after the first token, in the
same interleaved rounds; target (issue 35): within 5% of the unprotected call.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Callable, List, Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _rounds import DEFAULT_ROUNDS, MIN_ROUNDS, Spread, judge, verdict_text  # noqa: E402

from lattice.mcp import MCPServerStdio  # noqa: E402

SERVERS = {"echo": [str(ROOT / "examples" / "_mcp_echo_server.py")],
           "sdk": [str(ROOT / "tests" / "mcp" / "sdk_server.py"), "stdio"]}


def lattice_round(args: List[str], calls: int) -> float:
    """Seconds per call over ``calls`` sequential calls (after a warm-up)."""
    with MCPServerStdio(sys.executable, args) as server:
        for _ in range(50):
            server.call_tool("echo", {"text": "warm"})
        began = time.perf_counter()
        for i in range(calls):
            server.call_tool("echo", {"text": str(i)})
        return (time.perf_counter() - began) / calls


def sdk_round(args: List[str], calls: int) -> float:
    import anyio
    from mcp import ClientSession, StdioServerParameters, stdio_client

    async def run() -> float:
        params = StdioServerParameters(command=sys.executable, args=args)
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                for _ in range(50):
                    await session.call_tool("echo", {"text": "warm"})
                began = time.perf_counter()
                for i in range(calls):
                    await session.call_tool("echo", {"text": str(i)})
                return (time.perf_counter() - began) / calls

    return anyio.run(run)


def alternate(runs: List[Callable[[], float]], rounds: int) -> List[List[float]]:
    """Each of ``runs`` once a round, the order rotated each round; what each returned (its
    seconds per call: a server's start-up and warm-up are left out, so not
    ``_rounds.interleave``, which times the whole call)."""
    seconds: List[List[float]] = [[] for _ in runs]
    for round_ in range(rounds):
        for slot in [(round_ + i) % len(runs) for i in range(len(runs))]:
            seconds[slot].append(runs[slot]())
    return seconds


def print_rows(names: List[str], seconds: List[List[float]], target: float) -> Optional[bool]:
    """µs/call per client and the ratio of the last to the first within each round, with
    the verdict on its median (None below MIN_ROUNDS)."""
    for name, values in zip(names, seconds):
        print(f"  {name:11} {Spread(values).text('.1f', 1e6)} µs/call")
    ratio = Spread([a / b for a, b in zip(seconds[-1], seconds[0])])
    ok = judge(ratio, lambda v: v <= target)
    print(f"  ratio {names[-1]} / {names[0]} within a round: {ratio.text('.3f')} "
          f"(target <= {target}): {verdict_text(ok)}")
    return ok


def oauth_row(calls: int, rounds: int) -> Optional[bool]:
    """An OAuth-protected call against the same server unprotected, rounds alternating."""
    sys.path.insert(0, str(ROOT / "tests" / "mcp"))
    from oauth_fixture import AuthServer, follow

    from lattice.mcp import MCPServerHTTP, OAuth

    def one(server: AuthServer, protected: bool) -> float:
        server.open = not protected
        auth = OAuth(redirect_handler=follow) if protected else None
        with MCPServerHTTP(server.url, auth=auth, protocol_version="2025-11-25") as client:
            for _ in range(20):  # the first gets the token
                client.call_tool("whoami")
            began = time.perf_counter()
            for _ in range(calls):
                client.call_tool("whoami")
            return (time.perf_counter() - began) / calls

    with AuthServer() as server:
        seconds = alternate([lambda: one(server, False), lambda: one(server, True)], rounds)
    print(f"tools/call over Streamable HTTP, {calls} calls x {rounds} interleaved rounds, "
          "median (min-max):")
    return print_rows(["unprotected", "OAuth"], seconds, 1.05)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS,
                        help=f"interleaved rounds (default {DEFAULT_ROUNDS}; fewer than "
                        f"{MIN_ROUNDS}: shown, not judged)")
    parser.add_argument("--server", choices=["both", *sorted(SERVERS)], default="both")
    parser.add_argument("--oauth", action="store_true")
    options = parser.parse_args()
    if options.oauth:
        return 1 if oauth_row(options.calls, options.rounds) is False else 0
    try:
        import mcp  # noqa: F401
    except ImportError:
        sys.exit("needs the mcp SDK: pip install 'mcp>=2'")
    servers = sorted(SERVERS) if options.server == "both" else [options.server]
    results = [one_server(name, options.calls, options.rounds) for name in servers]
    return 1 if False in results else 0


def one_server(server: str, calls: int, rounds: int) -> Optional[bool]:
    args = SERVERS[server]
    seconds = alternate([lambda: sdk_round(args, calls), lambda: lattice_round(args, calls)],
                        rounds)
    print(f"tools/call round trip over stdio, {server} server, "
          f"{calls} calls x {rounds} interleaved rounds, median (min-max):")
    return print_rows(["mcp SDK", "lattice"], seconds, 1)


if __name__ == "__main__":
    sys.exit(main())
