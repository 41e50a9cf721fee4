"""Cost in dollars (SPEC 25, 25a): the bundled, dated price table, the lookup, the sum
model by model; ``Usage.by_model``."""
import json
import logging
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import reply

from lattice import Agent, BudgetExceededError, Usage, tool
from lattice.cost import bundled_prices, check_prices, cost_usd, price_of, prices_date
from lattice.testing import FunctionModelClient, ScriptedModelClient

ROOT = Path(__file__).resolve().parents[1]


def usage_of(model, i=0, o=0, w=0, r=0):
    return Usage(i, o, w, r).of_model(model)


def test_the_bundled_table_is_dated_and_complete():
    data = json.loads((ROOT / "lattice" / "prices.json").read_text())
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", prices_date()) and data["currency"] == "USD"
    table = bundled_prices()
    for model in ("claude-sonnet-4-5", "claude-haiku-4-5", "claude-opus-4-5", "gpt-4o",
                  "gpt-4o-mini", "gpt-5"):  # the models the docs name, and their kin
        assert {"input", "output"} <= set(table[model]), model
    for entry in data["models"].values():
        assert entry["provider"] in ("anthropic", "openai", "google")
    assert "prices.json" in (ROOT / "setup.cfg").read_text()  # packaged


def test_the_table_is_read_on_first_use_not_at_import():
    code = ("import sys, builtins; opened = []; real = builtins.open\n"
            "builtins.open = lambda f, *a, **k: (opened.append(str(f)), real(f, *a, **k))[1]\n"
            "import lattice, lattice.cost\n"
            "print(any('prices.json' in f for f in opened))\n"
            "lattice.cost.price_of('gpt-4o')\n"
            "print(any('prices.json' in f for f in opened))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, check=True).stdout.split()
    assert out == ["False", "True"]


@pytest.mark.parametrize("reported", [
    "claude-sonnet-4-5", "claude-sonnet-4-5-20250929",
    "anthropic.claude-sonnet-4-5-20250929-v1:0", "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
    "claude-sonnet-4-5@20250929",
    "arn:aws:bedrock:us-east-1:123456789012:inference-profile/"
    "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
])
def test_a_model_is_found_however_the_provider_spells_it(reported):
    assert price_of(reported) == {"input": 3.0, "output": 15.0, "cache_read": 0.3,
                                  "cache_write": 3.75}


def test_a_gemini_run_is_priced_as_the_model_version_it_reports():
    from lattice import GeminiClient
    from lattice.testing import MockMessagesServer

    assert price_of("models/gemini-2.5-flash") == price_of("gemini-2.5-flash")
    with MockMessagesServer(["Hello."], gemini_key="g-key") as server:
        client = GeminiClient(api_key="g-key", base_url=server.base_url)
        result = Agent(model="gemini-2.5-flash", model_client=client).prompt("Hi")
    usage = result.usage
    assert set(usage.by_model) == {"gemini-2.5-flash"}
    expected = (usage.input_tokens * 0.3 + usage.output_tokens * 2.5 +
                usage.cache_read_input_tokens * 0.03) / 1e6
    assert result.total_cost_usd == pytest.approx(expected) and expected > 0


def test_dated_openai_ids_and_unknown_models():
    assert price_of("gpt-4o-2024-08-06")["input"] == 2.5
    assert price_of("gpt-4o-mini-2024-07-18")["output"] == 0.6
    assert price_of("my-local-llama") is None


def test_cost_sums_each_model_at_its_price():
    usage = usage_of("claude-sonnet-4-5", i=1_000_000, o=100_000, w=200_000, r=2_000_000) + \
        usage_of("gpt-4o-mini", i=1_000_000, o=1_000_000)
    expected = (3.0 + 1.5 + 0.75 + 0.6) + (0.15 + 0.6)
    assert cost_usd(usage) == pytest.approx(expected)
    assert set(usage.by_model) == {"claude-sonnet-4-5", "gpt-4o-mini"}


def test_a_missing_cache_price_is_the_input_price_and_user_prices_win():
    prices = {"house-model": {"input": 2.0, "output": 4.0},
              "gpt-4o": {"input": 1.0, "output": 1.0}}
    usage = usage_of("house-model", i=1_000_000, w=1_000_000, r=1_000_000)
    assert cost_usd(usage, prices) == pytest.approx(6.0)
    assert cost_usd(usage_of("gpt-4o", i=1_000_000), prices) == pytest.approx(1.0)


def test_an_unpriced_model_makes_the_cost_none_and_says_which(caplog):
    caplog.set_level(logging.DEBUG, logger="lattice")
    usage = usage_of("gpt-4o", i=10) + usage_of("mystery-model", o=5)
    assert cost_usd(usage) is None
    assert "mystery-model" in caplog.text
    assert cost_usd(Usage()) == 0.0
    assert cost_usd(usage_of("mystery-model")) == 0.0  # no tokens, nothing to price


def test_tokens_no_model_claims_count_as_the_default_model():
    usage = Usage(1_000_000, 0) + usage_of("gpt-4o", i=1_000_000)  # e.g. a resumed total
    assert cost_usd(usage, default_model="gpt-4o-mini") == pytest.approx(2.5 + 0.15)
    assert cost_usd(usage) is None


def test_by_model_survives_sums_and_leaves_equality_alone():
    a, b = usage_of("m1", i=1, o=2), usage_of("m2", i=3) + usage_of("m1", o=5)
    total = a + b
    assert total.by_model["m1"] == Usage(1, 7) and total.by_model["m2"] == Usage(3, 0)
    assert total == Usage(4, 7) and total.to_dict() == Usage(4, 7).to_dict()
    assert a.by_model == {"m1": Usage(1, 2)}  # the operands are unchanged


@pytest.mark.parametrize("bad, match", [
    ("cheap", "must be a dict"),
    ({"m": 3}, r"prices\['m'\] must be a dict"),
    ({"m": {"input": 1}}, "needs 'output'"),
    ({"m": {"input": 1, "output": -2}}, "non-negative"),
    ({"m": {"input": 1, "output": True}}, "non-negative"),
    ({"m": {"input": 1, "output": 2, "cache_hit": 1}}, "unknown keys"),
    ({"": {"input": 1, "output": 2}}, "model id"),
])
def test_bad_prices_are_named(bad, match):
    with pytest.raises(ValueError, match=match):
        check_prices(bad)


# -- through the Agent: total_cost_usd, prices=, max_cost_usd ---------------------------------


@tool
def ping() -> str:
    """Answer pong."""
    return "pong"


def call_ping(usage, model=None):
    extra = {"model": model} if model else {}
    return reply({"type": "tool_use", "id": "t1", "name": "ping", "input": {}}, usage=usage,
                 **extra)


def test_total_cost_usd_of_a_query_and_usage_by_model():
    client = ScriptedModelClient([
        call_ping({"input_tokens": 1_000_000, "output_tokens": 0}, model="gpt-4o-2024-08-06"),
        reply("done", usage={"input_tokens": 0, "output_tokens": 1_000_000})])
    agent = Agent(model="claude-sonnet-4-5", model_client=client, tools=[ping])
    result = agent.prompt("go")
    # the first reply named its model; the second did not: the request's model
    assert set(result.usage.by_model) == {"gpt-4o-2024-08-06", "claude-sonnet-4-5"}
    assert result.usage.by_model["claude-sonnet-4-5"].output_tokens == 1_000_000
    assert result.total_cost_usd == pytest.approx(2.5 + 15.0)
    assert result.to_dict()["total_cost_usd"] == pytest.approx(17.5)


def test_prices_option_and_an_unpriced_model(caplog):
    caplog.set_level(logging.DEBUG, logger="lattice")
    usage = {"input_tokens": 500_000, "output_tokens": 500_000}
    agent = Agent(model="house-llm", model_client=ScriptedModelClient([reply("a", usage=usage)]))
    result = agent.prompt("go")
    assert result.total_cost_usd is None and "house-llm" in caplog.text
    priced = Agent(model="house-llm", prices={"house-llm": {"input": 1.0, "output": 3.0}},
                   model_client=ScriptedModelClient([reply("a", usage=usage)]))
    assert priced.prompt("go").total_cost_usd == pytest.approx(2.0)
    with pytest.raises(ValueError, match="prices"):
        Agent(model="m", prices={"m": {"input": "free", "output": 1}},
              model_client=ScriptedModelClient([]))


def test_max_cost_usd_stops_before_a_request_once_the_cost_reached_it():
    calls = []

    def model(request):
        calls.append(request)
        # each turn: 100k input tokens of gpt-4o-mini, $0.015
        return call_ping({"input_tokens": 100_000, "output_tokens": 0})

    agent = Agent(model="gpt-4o-mini", model_client=FunctionModelClient(model), tools=[ping],
                  max_cost_usd=0.04)
    result = agent.prompt("go")
    assert result.subtype == "error_max_budget" and result.is_error
    assert isinstance(result.error, BudgetExceededError) and "max_cost_usd" in str(result.error)
    assert len(calls) == 3  # $0.015, $0.030, $0.045 >= 0.04: the 4th is never sent
    assert result.total_cost_usd == pytest.approx(0.045)


@pytest.mark.parametrize("bad", [0, -1, "5", True, float("inf")])
def test_bad_max_cost_usd_is_named(bad):
    with pytest.raises(ValueError, match="max_cost_usd"):
        Agent(model="m", max_cost_usd=bad, model_client=ScriptedModelClient([]))


def test_an_unpriced_model_cannot_be_held_to_max_cost_usd(caplog):
    caplog.set_level(logging.WARNING, logger="lattice")
    client = ScriptedModelClient([call_ping({"input_tokens": 10**9}), reply("done")])
    result = Agent(model="house-llm", model_client=client, tools=[ping],
                   max_cost_usd=0.01).prompt("go")
    assert result.subtype == "success"
    assert "max_cost_usd" in caplog.text and "house-llm" in caplog.text


def test_a_fallback_run_is_priced_model_by_model():
    from lattice import FallbackModelClient, OverloadedError

    answers = iter([call_ping({"input_tokens": 1_000_000, "output_tokens": 0}),
                    OverloadedError("busy", status_code=529)])

    def first(request):
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    second = ScriptedModelClient([reply("done", usage={"input_tokens": 1_000_000,
                                                       "output_tokens": 0})])
    client = FallbackModelClient([FunctionModelClient(first), second],
                                 model_map={0: "claude-sonnet-4-5", 1: "gpt-4o-mini"})
    result = Agent(model="agent-model", model_client=client, tools=[ping]).prompt("go")
    assert result.result == "done"
    assert {m: u.input_tokens for m, u in result.usage.by_model.items()} == {
        "claude-sonnet-4-5": 1_000_000, "gpt-4o-mini": 1_000_000}
    assert result.total_cost_usd == pytest.approx(3.0 + 0.15)


def test_a_replayed_durable_run_reports_the_recorded_cost():
    from lattice import MemoryHistoryStore

    store = MemoryHistoryStore()
    usage = {"input_tokens": 1_000_000, "output_tokens": 0}

    def agent():
        client = ScriptedModelClient([reply("done", usage=usage)])
        return Agent(model="gpt-4o", model_client=client, history_store=store)

    first = agent().prompt("go", run_id="job-1")
    again = agent().prompt("go", run_id="job-1")
    assert again.replayed and first.total_cost_usd == pytest.approx(2.5)
    assert again.total_cost_usd == pytest.approx(2.5)


def test_a_rejected_reply_is_billed_too():
    from lattice import FallbackModelClient

    rejected = ScriptedModelClient([reply("meh", usage={"input_tokens": 1_000_000})])
    accepted = ScriptedModelClient([reply("good answer", usage={"input_tokens": 1_000_000})])
    client = FallbackModelClient([rejected, accepted], on_reply=lambda r: "good" in
                                 r["content"][0]["text"],
                                 model_map={0: "claude-sonnet-4-5", 1: "gpt-4o-mini"})
    result = Agent(model="m", model_client=client).prompt("go")
    assert result.result == "good answer"
    assert {m: u.input_tokens for m, u in result.usage.by_model.items()} == {
        "claude-sonnet-4-5": 1_000_000, "gpt-4o-mini": 1_000_000}
    assert result.usage.input_tokens == 2_000_000
    assert result.total_cost_usd == pytest.approx(3.0 + 0.15)
