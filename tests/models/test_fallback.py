"""FallbackModelClient (SPEC 25, 25a): classes or a predicate, reply rejection, never after a
streamed part reached the caller, compaction before a smaller window, ``.attempts``, the
answering model named, each client's own model id."""
import contextlib

import pytest
from helpers import reply

from lattice import (
    DEFAULT_COMPACTION_PROMPT,
    AbortController,
    Agent,
    AnthropicClient,
    APIConnectionError,
    BadRequestError,
    InternalServerError,
    OpenAIChatClient,
    OverloadedError,
    PromptTooLongError,
    RateLimitError,
)
from lattice.errors import ReplyRejectedError
from lattice.models import ModelRequest
from lattice.models.fallback import FallbackModelClient
from lattice.testing import FunctionModelClient, MockMessagesServer, ScriptedModelClient


def request(model="m-request", **extra):
    return ModelRequest(model=model, messages=[{"role": "user", "content": "hi"}], **extra)


class Failing:
    """A client that raises ``error`` (a fresh one each call) and counts its calls."""

    def __init__(self, make):
        self.make = make
        self.requests = []

    def create(self, request):
        self.requests.append(request)
        raise self.make()


def overloaded():
    return OverloadedError("overloaded", status_code=529)


def test_moves_on_for_a_default_error_and_names_the_answering_model():
    first = Failing(overloaded)
    second = ScriptedModelClient(["from second"])
    client = FallbackModelClient([first, second], model_map={1: "m-second"})
    out = client.create(request())
    assert out["content"][0]["text"] == "from second"
    assert out["model"] == "m-second"  # the reply names none: the model it was sent
    assert first.requests[0].model == "m-request"
    assert second.requests[0].model == "m-second"


@pytest.mark.parametrize("make", [
    lambda: RateLimitError("slow down", status_code=429),
    overloaded,
    lambda: InternalServerError("boom", status_code=500),
    lambda: APIConnectionError("reset"),
])
def test_each_default_class_falls_back(make):
    client = FallbackModelClient([Failing(make), ScriptedModelClient(["ok"])])
    assert client.create(request())["content"][0]["text"] == "ok"


def test_an_error_not_named_propagates_with_its_attempts():
    bad = BadRequestError("bad", status_code=400)
    second = ScriptedModelClient(["never"])
    client = FallbackModelClient([Failing(lambda: bad), second])
    with pytest.raises(BadRequestError) as info:
        client.create(request())
    assert info.value is bad and info.value.attempts == [bad]
    assert second.calls == 0


def test_classes_and_predicate():
    client = FallbackModelClient([Failing(lambda: BadRequestError("x", status_code=400)),
                                  ScriptedModelClient(["ok"])], fallback_on=BadRequestError)
    assert client.create(request())["content"][0]["text"] == "ok"
    seen = []

    def predicate(exc):
        seen.append(exc)
        return "retry elsewhere" in str(exc)

    client = FallbackModelClient([Failing(lambda: ValueError("retry elsewhere")),
                                  ScriptedModelClient(["ok"])], fallback_on=predicate)
    assert client.create(request())["content"][0]["text"] == "ok"
    assert isinstance(seen[0], ValueError)
    client = FallbackModelClient([Failing(lambda: ValueError("no")),
                                  ScriptedModelClient(["ok"])], fallback_on=predicate)
    with pytest.raises(ValueError, match="no"):
        client.create(request())


def test_total_failure_raises_the_last_with_every_attempt_in_order():
    errors = [overloaded(), RateLimitError("rl", status_code=429), APIConnectionError("down")]
    clients = [Failing(lambda e=e: e) for e in errors]
    with pytest.raises(APIConnectionError) as info:
        FallbackModelClient(clients).create(request())
    assert info.value is errors[-1]
    assert info.value.attempts == errors


def test_on_reply_rejects_and_accepts():
    first = ScriptedModelClient([reply("too short")])
    second = ScriptedModelClient([reply("a long enough answer")])
    client = FallbackModelClient(
        [first, second], on_reply=lambda r: len(r["content"][0]["text"]) > 10)
    assert client.create(request())["content"][0]["text"] == "a long enough answer"
    everyone_rejected = FallbackModelClient(
        [ScriptedModelClient(["a"]), Failing(overloaded)], on_reply=lambda r: False)
    with pytest.raises(OverloadedError) as info:
        everyone_rejected.create(request())
    rejected, last = info.value.attempts
    assert isinstance(rejected, ReplyRejectedError) and rejected.reply["content"][0]["text"] == "a"
    assert last is info.value
    with pytest.raises(ReplyRejectedError) as info:
        FallbackModelClient([ScriptedModelClient(["a"])], on_reply=lambda r: False).create(
            request())
    assert info.value.attempts == [info.value]


def test_a_client_built_with_its_own_model_sends_it():
    class OwnModel(ScriptedModelClient):
        model = "m-own"

    first, second = Failing(overloaded), OwnModel(["ok"])
    out = FallbackModelClient([first, second]).create(request())
    assert second.requests[0].model == "m-own" and out["model"] == "m-own"
    third = OwnModel(["ok"])
    FallbackModelClient([third], model_map={0: "m-mapped"}).create(request())
    assert third.requests[0].model == "m-mapped"  # model_map wins


def test_the_reply_model_wins_when_the_client_reports_one():
    second = ScriptedModelClient([reply("ok", model="m-reported")])
    out = FallbackModelClient([Failing(overloaded), second]).create(request())
    assert out["model"] == "m-reported"


def test_an_abort_never_falls_back():
    controller = AbortController()

    def aborting(req):
        controller.abort()
        raise APIConnectionError("cut by the abort")

    second = ScriptedModelClient(["never"])
    with pytest.raises(APIConnectionError):
        FallbackModelClient([FunctionModelClient(aborting), second]).create(
            request(signal=controller.signal))
    assert second.calls == 0


def test_bad_options_are_named():
    with pytest.raises(ValueError, match="at least one"):
        FallbackModelClient([])
    with pytest.raises(ValueError, match="fallback_on"):
        FallbackModelClient([ScriptedModelClient([])], fallback_on=42)
    with pytest.raises(ValueError, match="on_reply"):
        FallbackModelClient([ScriptedModelClient([])], on_reply="yes")
    with pytest.raises(ValueError, match="model_map"):
        FallbackModelClient([ScriptedModelClient([])], model_map={3: "m"})
    with pytest.raises(ValueError, match="model_map"):
        FallbackModelClient([ScriptedModelClient([])], model_map={0: ""})


# -- streaming: never after a part reached the caller ------------------------------------------


@contextlib.contextmanager
def stream_failing_then_second():
    """Two Messages servers, the first failing its stream after two events, the second
    answering "second", and a FallbackModelClient trying them in that order (no retries)."""
    with MockMessagesServer([MockMessagesServer.stream_error(after_events=2)]) as one, \
            MockMessagesServer(["second"]) as two:
        yield one, two, FallbackModelClient([
            AnthropicClient(api_key="k", base_url=one.base_url, max_retries=0),
            AnthropicClient(api_key="k", base_url=two.base_url, max_retries=0)])


def test_a_stream_that_failed_after_a_part_reached_the_caller_propagates():
    with stream_failing_then_second() as (one, two, client):
        agent = Agent(model="claude-mock", model_client=client, include_partial_messages=True)
        seen = []
        with pytest.raises(OverloadedError) as info:
            for message in agent.query("hi"):
                seen.append(message)
        assert any(m.type == "stream_event" for m in seen)
        assert two.requests == []
        assert info.value.attempts == [info.value]


def test_a_stream_that_failed_before_anything_reached_the_caller_falls_back():
    with stream_failing_then_second() as (one, two, client):
        agent = Agent(model="claude-mock", model_client=client)  # no partial messages
        assert agent.prompt("hi").result == "second"
        # partial messages asked for, but the first failed before its first event
        one.add(MockMessagesServer.error(529, "overloaded"))
        agent = Agent(model="claude-mock", model_client=client, include_partial_messages=True)
        messages = list(agent.query("hi"))
        assert messages[-1].result == "(mock) ok" or messages[-1].result == "second"
        assert len(two.requests) == 2


def test_across_wire_formats_the_answering_model_is_named():
    with MockMessagesServer([MockMessagesServer.error(529, "busy")]) as anthropic, \
            MockMessagesServer(["from chat"]) as chat:
        client = FallbackModelClient(
            [AnthropicClient(api_key="k", base_url=anthropic.base_url, max_retries=0),
             OpenAIChatClient(api_key="k", base_url=chat.base_url, max_retries=0)],
            model_map={1: "gpt-mock"})
        result = Agent(model="claude-mock", model_client=client).prompt("hi")
        assert result.result == "from chat"
        assert chat.requests[0]["model"] == "gpt-mock"
        assert anthropic.requests[0]["model"] == "claude-mock"


# -- compaction before a smaller window ----------------------------------------------------------


class SmallWindow:
    """A client whose context holds ``limit`` characters of messages: a longer request gets
    ``PromptTooLongError``, as a smaller-window model's API answers."""

    def __init__(self, limit):
        self.limit = limit
        self.requests = []

    def create(self, request):
        self.requests.append(request)
        size = len(repr(request.messages))
        if size > self.limit:
            raise PromptTooLongError(f"prompt is too long: {size} > {self.limit}",
                                     status_code=400)
        if DEFAULT_COMPACTION_PROMPT[:60] in repr(request.messages[-1]):
            return reply("SUMMARY of the early work")
        return reply(f"small answered ({size} chars)")


def test_a_too_long_history_is_compacted_before_the_smaller_window_answers():
    big = Failing(overloaded)  # the big-window model is down for the whole query
    small = SmallWindow(limit=4000)
    client = FallbackModelClient([big, small])
    agent = Agent(model="m", model_client=client,
                  auto_compact={"threshold_tokens": 10**9, "keep_recent_messages": 1})
    agent.replace_history([
        {"role": "user", "content": "early question " + "x" * 800},
        {"role": "assistant", "content": [{"type": "text", "text": "early answer " + "y" * 800}]},
    ])
    # the new turn makes the request too long for the small window; the summary request
    # (the early turns and the compaction prompt) still fits it
    messages = list(agent.query("now a long question " + "z" * 2500))
    result = messages[-1]
    assert result.subtype == "success", result
    assert result.result.startswith("small answered")
    assert any(m.type == "system" and m.subtype == "compaction" for m in messages)
    # the small model refused the long history, then got the summary request and the
    # compacted turn; the big one was tried first each time
    assert len(small.requests) == 3 and len(big.requests) == 3
    assert "SUMMARY" in repr(agent.get_history()[0])


def test_without_auto_compact_the_too_long_error_is_raised_with_attempts():
    big, small = Failing(overloaded), SmallWindow(limit=10)
    agent = Agent(model="m", model_client=FallbackModelClient([big, small]))
    with pytest.raises(PromptTooLongError) as info:
        agent.prompt("a question longer than ten characters")
    first, last = info.value.attempts
    assert isinstance(first, OverloadedError) and last is info.value


def test_count_tokens_asks_the_first_client():
    class Counting(ScriptedModelClient):
        def count_tokens(self, request):
            return len(request.model)

    client = FallbackModelClient([Counting([]), ScriptedModelClient([])],
                                 model_map={0: "four"})
    assert client.count_tokens(request()) == 4
    with pytest.raises(NotImplementedError):
        FallbackModelClient([ScriptedModelClient([])]).count_tokens(request())


def test_built_in_clients_built_with_a_model_send_it():
    with MockMessagesServer([MockMessagesServer.error(529, "busy")]) as one, \
            MockMessagesServer(["from the second"]) as two:
        client = FallbackModelClient([
            AnthropicClient(api_key="k", base_url=one.base_url, max_retries=0,
                            model="claude-big"),
            OpenAIChatClient(api_key="k", base_url=two.base_url, model="gpt-small")])
        result = Agent(model="agent-model", model_client=client).prompt("hi")
        assert result.result == "from the second"
        assert one.requests[0]["model"] == "claude-big"
        assert two.requests[0]["model"] == "gpt-small"
    with pytest.raises(ValueError, match="model"):
        AnthropicClient(api_key="k", model="")


def test_a_later_client_gets_what_is_left_of_the_request_deadline():
    import time as clock

    def slow_failure(req):
        clock.sleep(0.3)
        raise overloaded()

    second = ScriptedModelClient(["ok"])
    FallbackModelClient([FunctionModelClient(slow_failure), second]).create(
        request(timeout_ms=10_000))
    assert 5_000 < second.requests[0].timeout_ms <= 9_700


def test_each_client_keeps_its_own_retries():
    from lattice import RetryPolicy

    fast = RetryPolicy(max_retries=1, sleep=lambda seconds: None)
    with MockMessagesServer([MockMessagesServer.error(529, "busy"), "first, on its retry"]) \
            as one, MockMessagesServer(["never"]) as two:
        client = FallbackModelClient([
            AnthropicClient(api_key="k", base_url=one.base_url, retry_policy=fast),
            AnthropicClient(api_key="k", base_url=two.base_url)])
        assert Agent(model="m", model_client=client).prompt("hi").result == \
            "first, on its retry"
        assert len(one.requests) == 2 and two.requests == []
