"""The public surface of SPEC section 1, and what ``import lattice`` costs."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

import lattice

ROOT = Path(__file__).resolve().parents[1]

PUBLIC = """Agent create_agent tool Tool ToolResult ToolContext AbortController AbortSignal
ModelClient ModelRequest AnthropicClient HistoryStore define_history_store
create_jsonl_history_store JsonlHistoryStore SqliteHistoryStore MemoryHistoryStore AutoCompact
DEFAULT_COMPACTION_PROMPT OutputSchema SUBMIT_OUTPUT_TOOL_NAME Usage AssistantMessage
UserMessage SystemMessage ResultMessage StreamEvent LatticeError ConcurrentQueryError
MissingOutputError RequestTimeoutError AbortError APIError APIConnectionError APIStatusError
AuthenticationError PermissionDeniedError NotFoundError RateLimitError OverloadedError
InternalServerError BadRequestError PromptTooLongError HistoryStoreError SchemaError
LockLostError""".split()

@pytest.mark.parametrize("name", PUBLIC)
def test_spec_name_in_all(name):
    assert name in lattice.__all__  # importable: test_public_name_importable


def test_all_names_resolve():
    for name in lattice.__all__:
        assert getattr(lattice, name) is not None, name


def test_import_lattice_stays_in_stdlib():
    code = ("import sys, json; before = set(sys.modules); import lattice; "
            "print(json.dumps(sorted(set(sys.modules) - before)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, check=True).stdout
    loaded = json.loads(out)
    assert "requests" not in loaded and "urllib3" not in loaded
    if hasattr(sys, "stdlib_module_names"):
        foreign = [m for m in loaded if m.split(".")[0] not in sys.stdlib_module_names
                   and m.split(".")[0] != "lattice"]
        assert foreign == []
    # the file and database stores load on first use (issue 28), like the HTTP clients
    stores = {"lattice.stores.jsonl", "lattice.stores.sqlite", "lattice.stores.postgres",
              "lattice.stores.pg_driver", "sqlite3", "tempfile"}
    assert stores.isdisjoint(loaded), stores & set(loaded)


def test_stores_load_on_first_use():
    code = ("import sys, lattice, lattice.stores as s; "
            "assert 'lattice.stores.sqlite' not in sys.modules; "
            "assert lattice.SqliteHistoryStore is s.SqliteHistoryStore; "
            "from lattice import JsonlHistoryStore, PostgresHistoryStore; "
            "from lattice.stores import create_jsonl_history_store; "
            "print(sorted(m for m in sys.modules if m.startswith('lattice.stores.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, check=True).stdout
    for module in ("jsonl", "sqlite", "postgres"):
        assert f"lattice.stores.{module}" in out
    with pytest.raises(AttributeError, match="NoSuchStore"):
        lattice.NoSuchStore  # noqa: B018 - the lookup is the test
    with pytest.raises(AttributeError, match="NoSuchStore"):
        lattice.stores.NoSuchStore  # noqa: B018


def test_result_message_prints_well():
    r = lattice.ResultMessage("success", result="x" * 200, num_turns=2, duration_ms=5)
    assert len(repr(r)) < 150 and "success" in repr(r)
    assert "**success**" in r._repr_markdown_()
    assert json.loads(json.dumps(r.to_dict()))["subtype"] == "success"


# -- public names (SPEC 1) -------------------------------------------------------------------




@pytest.mark.parametrize("name", PUBLIC)
def test_public_name_importable(name):
    assert getattr(lattice, name) is not None


def test_submodules_names():
    import lattice.schema as schema
    import lattice.testing as testing

    for name in ("ScriptedModelClient", "FunctionModelClient", "MockMessagesServer"):
        assert getattr(testing, name)
    for name in ("validate", "is_valid", "compile", "ValidationError", "schema_from_type",
                 "schema_from_function"):
        assert getattr(schema, name)
    assert lattice.SUBMIT_OUTPUT_TOOL_NAME == "submit_output"


def test_requests_not_imported_by_the_core():
    code = ("import sys, lattice\n"
            "from lattice.testing import ScriptedModelClient\n"
            "a = lattice.Agent(model='m', model_client=ScriptedModelClient(['ok']))\n"
            "assert a.prompt('hi').result == 'ok'\n"
            "print('requests' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
