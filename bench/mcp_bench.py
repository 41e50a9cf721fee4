"""Round trip of a trivial ``tools/call`` over stdio: lattice.mcp vs the official ``mcp``
SDK client, against the same server, in the same run.

Each client starts its own copy of the server (``examples/_mcp_echo_server.py``, a small
hand-written server, by default; ``--server sdk`` uses tests/mcp/sdk_server.py, built with
the SDK), warms up, then makes N sequential ``echo`` calls; the rounds alternate between
the clients so drift on a shared machine hits both alike. Reported: median µs per call for
each client and the ratio lattice / SDK (below 1: lattice is faster). Target (issue 16):
lattice not slower, ratio <= 1.

    python bench/mcp_bench.py [--calls 2000] [--rounds 5] [--server echo|sdk]
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--server", choices=sorted(SERVERS), default="echo")
    options = parser.parse_args()
    try:
        import mcp  # noqa: F401
    except ImportError:
        sys.exit("needs the mcp SDK: pip install 'mcp>=2'")
    args = SERVERS[options.server]
    clients: List[tuple[str, Callable[[List[str], int], float]]] = [
        ("lattice", lattice_round), ("mcp SDK", sdk_round)]
    times: dict[str, List[float]] = {name: [] for name, _ in clients}
    for _ in range(options.rounds):
        for name, run in clients:
            times[name].append(run(args, options.calls))
    medians = {name: statistics.median(values) for name, values in times.items()}
    print(f"tools/call round trip over stdio, {options.server} server, "
          f"{options.calls} calls x {options.rounds} rounds (median of rounds):")
    for name, value in medians.items():
        print(f"  {name:8} {value * 1e6:8.1f} µs/call")
    ratio = medians["lattice"] / medians["mcp SDK"]
    print(f"  ratio lattice / SDK: {ratio:.2f} (target <= 1): {'PASS' if ratio <= 1 else 'FAIL'}")


if __name__ == "__main__":
    main()
