"""lattice.schema's public surface, import cost, and bundled meta-schemas when vendored."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import lattice
from lattice import schema
from lattice.errors import LatticeError, SchemaError

PACKAGE = Path(lattice.__file__).resolve().parent


def test_public_names() -> None:
    assert set(schema.__all__) == {
        "validate",
        "is_valid",
        "compile",
        "Validator",
        "ValidationError",
        "ErrorDetail",
        "SchemaError",
        "format_path",
        "schema_from_type",
        "schema_from_function",
        "parse_docstring",
    }
    for name in schema.__all__:
        assert getattr(schema, name) is not None
    assert schema.SchemaError is SchemaError
    assert issubclass(schema.ValidationError, LatticeError)
    assert issubclass(schema.ValidationError, ValueError)


def test_import_is_cheap_and_lazy() -> None:
    code = (
        "import sys, lattice.schema\n"
        "lazy = ['lattice.schema._formats', 'lattice.schema._from_type', "
        "'lattice.schema._docstrings', 'lattice.schema._unevaluated', 'lattice.schema._idna']\n"
        "assert not [m for m in lazy if m in sys.modules], [m for m in lazy if m in sys.modules]\n"
        "from lattice.schema import _draft7, _registry\n"
        "assert not _draft7._cache and not _registry._metaschema_cache\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=PACKAGE.parent)


def test_metaschemas_are_bundled_as_package_data() -> None:
    root = PACKAGE / "schema" / "metaschemas"
    names = sorted(p.relative_to(root).as_posix() for p in root.rglob("*.json"))
    assert names == [
        "draft2020-12/meta/applicator.json",
        "draft2020-12/meta/content.json",
        "draft2020-12/meta/core.json",
        "draft2020-12/meta/format-annotation.json",
        "draft2020-12/meta/format-assertion.json",
        "draft2020-12/meta/meta-data.json",
        "draft2020-12/meta/unevaluated.json",
        "draft2020-12/meta/validation.json",
        "draft2020-12/schema.json",
        "draft7/schema.json",
    ]
    for path in root.rglob("*.json"):
        document = json.loads(path.read_text(encoding="utf-8"))
        assert document["$id"].startswith(("https://json-schema.org/", "http://json-schema.org/"))


def test_works_when_vendored_into_another_package(tmp_path: Path) -> None:
    host = tmp_path / "hostapp"
    host.mkdir()
    (host / "__init__.py").write_text("")
    shutil.copytree(PACKAGE, host / "_lattice", ignore=shutil.ignore_patterns("__pycache__"))
    code = (
        "from hostapp._lattice import schema\n"
        "meta = {'$ref': 'https://json-schema.org/draft/2020-12/schema'}\n"
        "assert schema.is_valid({'type': 'string'}, meta)\n"
        "assert not schema.is_valid({'type': 1}, meta)\n"
        "assert not schema.is_valid({'type': 1}, {'$ref': 'http://json-schema.org/draft-07/schema#'})\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=tmp_path)
