"""The ``lattice`` command line: one-shot, --json, --session, chat, errors, Ctrl-C.

Quick cases call ``main(argv)`` in this process; what needs a terminal-like process of its
own (stdin, signals, resuming from a file in a new process) runs ``python -m lattice``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import pytest

from lattice.cli.main import main
from lattice.testing import MockMessagesServer

ROOT = Path(__file__).resolve().parents[2]


def offline_env() -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
    env.pop("LATTICE_MODEL", None)
    env["PYTHONPATH"] = str(ROOT)
    env["PYTHONIOENCODING"] = "utf-8"
    return env


def lattice(*args: str, input: str = "", cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lattice", *args], input=input, cwd=cwd,
                          env=offline_env(), capture_output=True, text=True, timeout=30)


@pytest.fixture
def no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL",
                 "LATTICE_MODEL"):
        monkeypatch.delenv(name, raising=False)


# -- one-shot ----------------------------------------------------------------------------


def test_one_shot_with_mock_streams_the_reply(no_key: None,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--mock", "hello", "there"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("(mock) You said: 'hello there'.")
    assert out.endswith("claude-sonnet-4-5.\n") and out.count("\n") == 1
    assert err == ""


def test_python_dash_m_lattice() -> None:
    done = lattice("--mock", "--model", "my-model", "hi")
    assert done.returncode == 0, done.stderr
    assert "You said: 'hi'" in done.stdout and "my-model" in done.stdout


def test_json_prints_the_result_message(no_key: None,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--mock", "--json", "--system", "Be kind.", "hi"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["type"] == "result" and result["subtype"] == "success"
    assert result["is_error"] is False and result["error"] is None
    assert "You said: 'hi'" in result["result"]
    assert result["num_turns"] == 1 and result["usage"]["input_tokens"] > 0


def test_model_default_comes_from_the_environment(no_key: None,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("LATTICE_MODEL", "env-model")
    assert main(["--mock", "hi"]) == 0
    assert "talk to env-model." in capsys.readouterr().out


def test_prompt_from_stdin(no_key: None, monkeypatch: pytest.MonkeyPatch,
                           capsys: pytest.CaptureFixture[str]) -> None:
    import io

    monkeypatch.setattr(sys, "stdin", io.StringIO("piped prompt\n"))
    assert main(["--mock", "-"]) == 0
    assert "You said: 'piped prompt'" in capsys.readouterr().out


def test_session_resumes_across_processes(tmp_path: Path) -> None:
    first = lattice("--mock", "--session", "talk.jsonl", "My name is Ada.", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert "prompt 1 of this conversation" in first.stdout
    second = lattice("--mock", "--session", "talk.jsonl", "What is my name?", cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    assert "prompt 2 of this conversation" in second.stdout  # it was sent the first turn
    lines = (tmp_path / "talk.jsonl").read_text().splitlines()
    assert [json.loads(line)["role"] for line in lines] == ["user", "assistant"] * 2


# -- errors ----------------------------------------------------------------------------


def test_missing_api_key_says_how_to_fix_it(no_key: None,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["hello"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert "no API key" in err and "export ANTHROPIC_API_KEY=" in err
    assert "ANTHROPIC_AUTH_TOKEN" in err and "--mock" in err


def test_missing_api_key_exit_code_from_a_process() -> None:
    done = lattice("chat")
    assert done.returncode == 2
    assert "ANTHROPIC_API_KEY" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("args, message", [
    (["--max-turns", "0", "hi"], "--max-turns must be a positive integer"),
    (["--max-turns", "many", "hi"], "--max-turns must be a positive integer"),
    (["--timeout-ms", "-5", "hi"], "--timeout-ms must be a positive integer"),
    (["--mock-delay", "soon", "hi"], "--mock-delay must be a number"),
    (["--base-url", "http://x", "hi"], "--mock runs its own server"),
    ([], "give a prompt"),
    (["--no-such-option", "hi"], "unrecognized arguments: --no-such-option"),
])
def test_bad_options(no_key: None, capsys: pytest.CaptureFixture[str], args: List[str],
                     message: str) -> None:
    assert main(["--mock", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and err.startswith("usage: lattice")


def test_bad_options_are_reported_before_a_missing_key(
        no_key: None, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--max-turns", "0", "hi"]) == 2
    err = capsys.readouterr().err
    assert "--max-turns must be a positive integer" in err and "API key" not in err


def test_bad_base_url_is_a_usage_error(no_key: None, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-key-123")
    assert main(["--base-url", "ftp://example.com", "hi"]) == 2
    assert "base_url must be an http(s) URL" in capsys.readouterr().err


def test_api_error_prints_class_and_message(no_key: None, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-key-123")
    with MockMessagesServer([MockMessagesServer.error(401, "invalid x-api-key")]) as server:
        assert main(["--base-url", server.base_url, "hi"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: AuthenticationError: invalid x-api-key (status 401")


def test_error_result_exits_1(no_key: None, monkeypatch: pytest.MonkeyPatch,
                              capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-key-123")
    with MockMessagesServer([MockMessagesServer.delay(2.0, "late")]) as server:
        assert main(["--base-url", server.base_url, "--timeout-ms", "100", "hi"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: error_timeout: RequestTimeoutError:")


def test_version_and_help(capsys: pytest.CaptureFixture[str]) -> None:
    import lattice

    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"lattice {lattice.__version__}"
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "--session FILE.jsonl" in out and "--mock-delay" not in out  # hidden: for tests


def _limited_file_size(size: int):  # type: ignore[no-untyped-def]
    def limit() -> None:  # in the child: writes beyond ``size`` bytes fail with EFBIG
        import resource

        resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))

    return limit


@pytest.mark.parametrize("where", ["a-file/talk.jsonl", "a-file/deeper/talk.jsonl", "a-dir"])
def test_an_unusable_session_path_is_refused_before_anything_is_sent(
        where: str, tmp_path: Path, no_key: None, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a-file").write_text("not a directory")
    (tmp_path / "a-dir").mkdir()
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-key-123")
    path = str(tmp_path / where)
    with MockMessagesServer() as server:
        assert main(["--base-url", server.base_url, "--session", path, "hi"]) == 2
        assert main(["chat", "--base-url", server.base_url, "--session", path]) == 2
        assert server.requests == []
    out, err = capsys.readouterr()
    assert out == "" and "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 2 and lines[0] == lines[1]
    assert lines[0].startswith(f"lattice: --session {path}: ")
    assert "directory" in lines[0] or "does not exist" in lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-dir", "a-file"]  # no debris


def test_a_usable_session_path_is_probed_without_leaving_a_file(tmp_path: Path,
                                                                no_key: None) -> None:
    (tmp_path / "dir").mkdir()
    done = lattice("chat", "--mock", "--session", "dir/s.jsonl", input="", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert list((tmp_path / "dir").iterdir()) == []


def test_a_session_in_a_missing_folder_is_refused_and_no_folder_is_made(tmp_path: Path,
                                                                        no_key: None) -> None:
    done = lattice("chat", "--mock", "--session", "new/dir/s.jsonl", input="", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr == (f"lattice: --session new/dir/s.jsonl: its folder "
                           f"{tmp_path / 'new' / 'dir'} does not exist (lattice does not "
                           f"create folders)\n")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(sys.platform == "win32", reason="RLIMIT_FSIZE needs POSIX")
def test_a_session_file_failing_later_is_one_line_and_exit_1(tmp_path: Path) -> None:
    # 300 bytes take the prompt; the reply does not fit (a full disk, as the store sees it).
    done = subprocess.run(
        [sys.executable, "-m", "lattice", "chat", "--mock", "--session", "s.jsonl"],
        input="short\nsecond prompt\n", cwd=tmp_path, env=offline_env(), text=True,
        capture_output=True, timeout=30, preexec_fn=_limited_file_size(300))
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert errors == [line for line in errors if "the session file failed" in line]
    assert len(errors) == 1 and "s.jsonl" in errors[0]
    assert "second prompt" not in done.stdout  # the chat stopped: nothing more was lost


@pytest.mark.skipif(sys.platform == "win32", reason="RLIMIT_FSIZE needs POSIX")
def test_a_prompt_that_cannot_be_saved_is_not_sent(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "lattice", "--mock", "--session", "s.jsonl", "x" * 400],
        cwd=tmp_path, env=offline_env(), text=True, capture_output=True, timeout=30,
        preexec_fn=_limited_file_size(300))
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith("error: the session file failed") and "Traceback" not in (
        done.stderr)


# -- chat --------------------------------------------------------------------------------


def test_chat_reads_lines_until_eof() -> None:
    done = lattice("chat", "--mock", input="first line\n\nsecond line\n")
    assert done.returncode == 0, done.stderr
    replies = done.stdout.splitlines()
    assert len(replies) == 2
    assert "You said: 'first line'. That is prompt 1" in replies[0]
    assert "You said: 'second line'. That is prompt 2" in replies[1]
    assert "lattice chat" in done.stderr  # the banner goes to stderr, not the transcript


def test_chat_exit_command_and_json_lines(tmp_path: Path) -> None:
    done = lattice("chat", "--mock", "--json", "--session", "s.jsonl", input="one\n/exit\ntwo\n",
                   cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    results = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["subtype"] for r in results] == ["success"]
    resumed = lattice("chat", "--mock", "--session", "s.jsonl", input="", cwd=tmp_path)
    assert "(resumed 2 messages from s.jsonl)" in resumed.stderr


def test_chat_commands_are_not_sent_to_the_model() -> None:
    done = lattice("chat", "--mock", input="/help\n/xyz now\n//etc/hosts\nhello\n/HELP\n")
    assert done.returncode == 0, done.stderr
    replies = done.stdout.splitlines()
    assert len(replies) == 2  # only the two prompts reached the model
    assert "You said: '/etc/hosts'. That is prompt 1" in replies[0]
    assert "You said: 'hello'. That is prompt 2" in replies[1]
    assert "/exit, /quit" in done.stderr and "//text" in done.stderr  # /help's list
    assert "unknown command /xyz: /help lists the commands" in done.stderr
    assert "unknown command /HELP" in done.stderr


def _start_chat(*args: str, env: Optional[Dict[str, str]] = None) -> subprocess.Popen[str]:
    process = subprocess.Popen([sys.executable, "-m", "lattice", "chat", *args],
                               cwd=ROOT, env=env or offline_env(), stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stderr is not None
    banner = process.stderr.readline()  # printed once the Ctrl-C handler is in place
    assert banner.startswith("lattice chat"), banner
    return process


def _finish(process: subprocess.Popen[str]) -> Tuple[int, str, str]:
    assert process.stdout is not None and process.stderr is not None
    try:
        code = process.wait(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
    return code, process.stdout.read(), process.stderr.read()


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to a child needs POSIX")
def test_ctrl_c_interrupts_the_turn_and_chat_goes_on() -> None:
    arrived = threading.Event()

    def slow_first_reply(body: Dict[str, Any]) -> Any:
        arrived.set()  # the request is here: the reply is now on its way (it takes 30 s)
        return MockMessagesServer.delay(30.0, echo(body))  # cut short when the server closes

    def echo(body: Dict[str, Any]) -> str:
        prompts = [m["content"] for m in body["messages"] if isinstance(m["content"], str)]
        return f"You said: {prompts[-1]!r}. That is prompt {len(prompts)}"

    with MockMessagesServer([slow_first_reply, echo]) as server:
        process = _start_chat("--base-url", server.base_url,
                              env={**offline_env(), "ANTHROPIC_API_KEY": "sk-test-key-123"})
        assert process.stdin is not None
        started = time.monotonic()
        process.stdin.write("tell me a long story\n")
        process.stdin.flush()
        assert arrived.wait(20), "the first request never reached the server"
        process.send_signal(signal.SIGINT)
        process.stdin.write("second prompt\n")
        process.stdin.close()
        code, out, err = _finish(process)

    assert code == 0, err
    assert "(interrupted)" in err and "Traceback" not in err
    # The interrupted reply never arrived; the next prompt was read and answered, and the
    # model was sent the whole conversation (both prompts).
    assert "long story" not in out
    assert "You said: 'second prompt'. That is prompt 2" in out
    assert time.monotonic() - started < 15  # interrupted early, not after 30 s


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to a child needs POSIX")
def test_ctrl_c_while_idle_exits() -> None:
    process = _start_chat("--mock")
    process.send_signal(signal.SIGINT)  # waiting for input: quit
    code, out, err = _finish(process)
    assert code == 130
    assert out == "" and "Traceback" not in err


def test_verbose_prints_the_usage_and_cache_hits_of_each_answer() -> None:
    done = lattice("--mock", "--verbose", "hello")
    assert done.returncode == 0, done.stderr
    line = [x for x in done.stderr.splitlines() if x.startswith("[usage]")]
    assert len(line) == 1 and "cache read" in line[0] and "1 request" in line[0]


def test_usage_line_shows_the_share_read_from_cache() -> None:
    from lattice import ResultMessage, Usage
    from lattice.cli.main import usage_line

    result = ResultMessage("success", usage=Usage(100, 20, 50, 850), num_turns=3,
                           duration_ms=12)
    assert usage_line(result) == ("[usage] 100 in + 850 cache read + 50 cache write, 20 out "
                                  "(85% from cache); 3 requests, 12 ms")


def test_verbose_prints_the_cost_of_each_answer_and_the_run() -> None:
    done = lattice("--mock", "--verbose", "hello")  # the mock answers as claude-sonnet-4-5
    assert done.returncode == 0, done.stderr
    line = [x for x in done.stderr.splitlines() if x.startswith("[cost]")]
    assert len(line) == 1 and line[0].count("$") == 2, done.stderr
    from lattice.cli.session import cost_line

    assert cost_line(0.0123, None) == "[cost] $0.012300 this answer, unknown this run"


def test_json_output_carries_the_cost() -> None:
    done = lattice("--mock", "--json", "hello")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1])["total_cost_usd"] > 0
