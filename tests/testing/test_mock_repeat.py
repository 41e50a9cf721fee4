"""``MockMessagesServer(repeat=True)``: the script starts over when it runs out, so a
long-running mock (the CLI's --mock, the web chat, the examples) scripts one function."""

from __future__ import annotations

from typing import Any, Dict

import pytest

from lattice import Agent
from lattice.testing import MockMessagesServer


def agent_on(server: MockMessagesServer) -> Agent:
    return Agent(model="m", base_url=server.base_url, api_key="k")


def test_one_function_answers_every_request() -> None:
    def echo(body: Dict[str, Any]) -> str:
        return "echo " + body["messages"][-1]["content"]

    with MockMessagesServer([echo], repeat=True) as server:
        agent = agent_on(server)
        answers = [agent.prompt(f"n{i}").result for i in range(25)]
    assert answers == [f"echo n{i}" for i in range(25)]


def test_a_longer_script_starts_over_and_added_replies_join_it() -> None:
    with MockMessagesServer(["a", "b"], repeat=True) as server:
        agent = agent_on(server)
        first = [agent.prompt("x").result for _ in range(3)]
        server.add("c")
        later = [agent.prompt("x").result for _ in range(5)]
    assert first == ["a", "b", "a"]
    assert later == ["b", "a", "c", "b", "a"]  # "c" joins the end of the cycle


def test_without_repeat_the_script_runs_out() -> None:
    with MockMessagesServer(["a"]) as server:
        agent = agent_on(server)
        assert [agent.prompt("x").result for _ in range(2)] == [
            "a", MockMessagesServer.DEFAULT_TEXT]


def test_an_empty_script_still_answers() -> None:
    with MockMessagesServer(repeat=True) as server:
        assert agent_on(server).prompt("x").result == MockMessagesServer.DEFAULT_TEXT


def test_repeat_must_be_a_bool() -> None:
    with pytest.raises(ValueError, match="repeat must be a bool, got 'yes'"):
        MockMessagesServer(repeat="yes")  # type: ignore[arg-type]
