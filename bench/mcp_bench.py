"""Round trip of a trivial ``tools/call`` over stdio: lattice.mcp vs the official ``mcp``
SDK client, against the same server, in the same run.

Each client starts its own copy of the server, by default of both servers in turn (issue
28: not only lattice's own): ``examples/_mcp_echo_server.py``, a small hand-written
server, and tests/mcp/sdk_server.py, built with the SDK (``--server echo|sdk`` for one);
it warms up, then makes N sequential ``echo`` calls; the rounds alternate between
the clients so drift on a shared machine hits both alike. Reported: median µs per call for
each client and the ratio lattice / SDK (below 1: lattice is faster). Target (issue 16):
lattice not slower, ratio <= 1, on each server (PASS/FAIL each; exit status 1 if any
fails).

    python bench/mcp_bench.py [--calls 2000] [--rounds 5] [--server both|echo|sdk]

``--oauth``: instead, an OAuth-protected ``tools/call`` over Streamable HTTP against the
same local server unprotected (tests/mcp/oauth_fixture.py), after the first token; target
(issue 35): within 5% of the unprotected call.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Callable, List

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

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


def oauth_row(calls: int, rounds: int) -> bool:
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

    times: dict[str, List[float]] = {"unprotected": [], "OAuth": []}
    with AuthServer() as server:
        for round_ in range(rounds):
            order = [False, True] if round_ % 2 == 0 else [True, False]
            for protected in order:
                times["OAuth" if protected else "unprotected"].append(one(server, protected))
    medians = {name: statistics.median(values) for name, values in times.items()}
    print(f"tools/call over Streamable HTTP, {calls} calls x {rounds} rounds (median):")
    for name, value in medians.items():
        print(f"  {name:11} {value * 1e6:8.1f} µs/call")
    ratio = medians["OAuth"] / medians["unprotected"]
    print(f"  ratio OAuth / unprotected: {ratio:.3f} (target <= 1.05): "
          f"{'PASS' if ratio <= 1.05 else 'FAIL'}")
    return ratio <= 1.05


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--server", choices=["both", *sorted(SERVERS)], default="both")
    parser.add_argument("--oauth", action="store_true")
    options = parser.parse_args()
    if options.oauth:
        return 0 if oauth_row(options.calls, options.rounds) else 1
    try:
        import mcp  # noqa: F401
    except ImportError:
        sys.exit("needs the mcp SDK: pip install 'mcp>=2'")
    servers = sorted(SERVERS) if options.server == "both" else [options.server]
    results = [one_server(name, options.calls, options.rounds) for name in servers]
    return 0 if all(results) else 1


def one_server(server: str, calls: int, rounds: int) -> bool:
    args = SERVERS[server]
    clients: List[tuple[str, Callable[[List[str], int], float]]] = [
        ("lattice", lattice_round), ("mcp SDK", sdk_round)]
    times: dict[str, List[float]] = {name: [] for name, _ in clients}
    for round_ in range(rounds):
        for name, run in clients if round_ % 2 == 0 else clients[::-1]:
            times[name].append(run(args, calls))
    medians = {name: statistics.median(values) for name, values in times.items()}
    print(f"tools/call round trip over stdio, {server} server, "
          f"{calls} calls x {rounds} rounds (median of rounds):")
    for name, value in medians.items():
        print(f"  {name:8} {value * 1e6:8.1f} µs/call")
    ratio = medians["lattice"] / medians["mcp SDK"]
    print(f"  ratio lattice / SDK: {ratio:.2f} (target <= 1): {'PASS' if ratio <= 1 else 'FAIL'}")
    return ratio <= 1


if __name__ == "__main__":
    sys.exit(main())
