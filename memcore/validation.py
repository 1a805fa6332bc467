"""Input validation shared by every layer: a bad value becomes :class:`memcore.errors.ValidationError`
naming the field; an unexpected backend failure becomes :class:`memcore.errors.StoreError`.

- :func:`first_error`: the one mapping from pydantic's error list (``ValidationError.errors()``,
  FastAPI's ``RequestValidationError.errors()``) to a message and a dotted field;
- :func:`validate`: ``data`` as a model, or a ValidationError naming the first bad field;
- :func:`make_key`, :func:`check_session`: the scope and the session id, checked by the
  identifier rule of :mod:`memcore.fields` (through the models of :mod:`memcore.model`);
- :func:`store_errors`: a context that turns backend exceptions into StoreError (HTTP 503).
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import pydantic
from pydantic import BaseModel

from memcore.errors import MemoryServiceError, StoreError, ValidationError
from memcore.metadata import refine_loc
from memcore.model import SessionRef, UserKey

T = TypeVar("T", bound=BaseModel)


def first_error(errors: Sequence[Mapping[str, Any]], *, skip: Collection[str] = ()) -> tuple[str, str | None]:
    """(message, dotted field or None) of the first pydantic error; a leading location part in
    ``skip`` (FastAPI's ``body`` / ``query`` / ``path``) is dropped."""
    if not errors:
        return "invalid value", None
    err = errors[0]
    parts = list(refine_loc(tuple(err.get("loc", ())), (err.get("ctx") or {}).get("error")))
    if parts and parts[0] in skip:
        parts = parts[1:]
    msg = str(err.get("msg", "invalid value")).removeprefix("Value error, ")
    return msg, ".".join(str(p) for p in parts) or None


def error_of(exc: pydantic.ValidationError, *, prefix: str = "") -> ValidationError:
    """``exc`` as the domain's ValidationError, its field prefixed by ``prefix`` (e.g. ``entries.3.``)."""
    msg, loc = first_error(exc.errors())
    return ValidationError(msg, field=f"{prefix}{loc}" if loc else (prefix.rstrip(".") or None))


def validate(model: type[T], data: Any, *, prefix: str = "") -> T:
    """Validate ``data`` as ``model``; raise :class:`ValidationError` naming the first bad field."""
    if isinstance(data, model):
        return data
    try:
        return model.model_validate(data)
    except pydantic.ValidationError as exc:
        raise error_of(exc, prefix=prefix) from None


def make_key(app: str, user: str) -> UserKey:
    return validate(UserKey, {"app": app, "user": user})


def check_session(session: Any) -> str:
    """A session id (the identifier rule of :mod:`memcore.fields`); raises naming ``session``."""
    return validate(SessionRef, {"session": session}).session


@contextmanager
def store_errors(what: str) -> Iterator[None]:
    """Turn unexpected backend failures into StoreError (HTTP 503); domain errors pass through."""
    try:
        yield
    except MemoryServiceError:
        raise
    except Exception as exc:
        raise StoreError(f"{what} failed: {type(exc).__name__}: {exc}", field="store") from exc
