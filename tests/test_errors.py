"""The error tree of lattice/errors.py (SPEC 1)."""
import pytest

import lattice

TREE = {
    "ConcurrentQueryError": "LatticeError", "LockLostError": "ConcurrentQueryError",
    "MissingOutputError": "LatticeError",
    "RequestTimeoutError": "LatticeError", "AbortError": "LatticeError",
    "HistoryStoreError": "LatticeError", "SchemaError": "LatticeError",
    "APIError": "LatticeError", "APIConnectionError": "APIError",
    "APIStatusError": "APIError", "BadRequestError": "APIStatusError",
    "PromptTooLongError": "BadRequestError", "AuthenticationError": "APIStatusError",
    "PermissionDeniedError": "APIStatusError", "NotFoundError": "APIStatusError",
    "RateLimitError": "APIStatusError", "InternalServerError": "APIStatusError",
    "OverloadedError": "APIStatusError", "LatticeError": "Exception",
}


@pytest.mark.parametrize("child,parent", sorted(TREE.items()))
def test_error_tree(child, parent):
    base = Exception if parent == "Exception" else getattr(lattice, parent)
    assert issubclass(getattr(lattice, child), base)


def test_the_drawn_tree_names_every_error():
    import lattice.errors
    import lattice.mcp
    from lattice import schema

    drawn = lattice.errors.__doc__ or ""
    classes = [getattr(lattice, n) for n in dir(lattice)] + [schema.ValidationError,
                                                             lattice.mcp.MCPError]
    errors = {c.__name__ for c in classes
              if isinstance(c, type) and issubclass(c, lattice.LatticeError)}
    assert "ValidationError" in errors
    assert {name for name in errors - {"LatticeError"} if f"── {name}" not in drawn} == set()


def test_error_extra_bases():
    assert issubclass(lattice.RequestTimeoutError, TimeoutError)
    assert issubclass(lattice.SchemaError, ValueError)


@pytest.mark.parametrize("name", ["APIError", "APIConnectionError", "APIStatusError",
                                  "BadRequestError", "PromptTooLongError",
                                  "AuthenticationError", "PermissionDeniedError",
                                  "NotFoundError", "RateLimitError", "InternalServerError",
                                  "OverloadedError"])
def test_api_errors_constructible_by_custom_clients(name):
    cls = getattr(lattice, name)
    err = cls("boom happened", status_code=418, request_id="req_1", body={"x": 1})
    assert "boom happened" in str(err)
    if issubclass(cls, lattice.APIStatusError):
        assert (err.status_code, err.request_id, err.body) == (418, "req_1", {"x": 1})
    plain = cls("just a message")
    assert isinstance(plain, lattice.LatticeError)


# -- details ---------------------------------------------------------------------------------


def test_api_errors_carry_details():
    e = lattice
    err = e.RateLimitError("slow down", status_code=429, request_id="req_1", body={"x": 1})
    assert (err.status_code, err.request_id, err.body) == (429, "req_1", {"x": 1})
    assert "slow down" in str(err)
    from lattice.errors import error_class_for_type, status_error_class

    assert error_class_for_type("overloaded_error") is e.OverloadedError
    assert status_error_class(503) is e.InternalServerError
    assert status_error_class(529) is e.OverloadedError
    assert issubclass(e.MaxTurnsExceededError, e.LatticeError)
