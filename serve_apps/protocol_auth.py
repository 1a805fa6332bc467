"""Which app and user a protocol endpoint without them in its path (MCP, Mem0) serves.

The API key selects the app: a key that opens one app selects it; one that opens several names it
with :data:`APP_HEADER` (an app the key does not open: 403); with auth off the header names the app,
else ``default`` (none: 422). The user of MCP requests comes from :data:`USER_HEADER`.

Header values are UTF-8 (:func:`header_text`): ``X-Memcluster-User: café`` (sent as the bytes
``caf\xc3\xa9``) names the user ``café``, the same user as ``/v1/apps/{app}/users/caf%C3%A9``; bytes that
are not UTF-8 are 422 naming the header (HTTP servers would read them as Latin-1, another user).
"""

from __future__ import annotations

from starlette.requests import Request

from memcore.errors import PermissionDeniedError, ValidationError
from memcore.validation import make_key
from serve_apps.http.access import granted_apps

APP_HEADER = "X-Memcluster-App"
USER_HEADER = "X-Memcluster-User"


def header_text(request: Request, name: str) -> str | None:
    """The header's value decoded as UTF-8 (None when absent); invalid UTF-8 or a repeated header is 422
    naming it."""
    wanted = name.lower().encode("latin-1")
    values = [v for k, v in request.scope.get("headers", ()) if k.lower() == wanted]
    if not values:
        return None
    if len(values) > 1:
        raise ValidationError(f"more than one {name} header", field=name)
    try:
        return bytes(values[0]).decode("utf-8")
    except UnicodeDecodeError:
        raise ValidationError(f"{name} is not valid UTF-8", field=name) from None


def resolve_app(request: Request, schemes: tuple[str, ...], default: str | None) -> str:
    """The app of the request (see the module docstring); 401 / 403 / 422 as the API's errors."""
    granted = granted_apps(request, schemes)
    asked = header_text(request, APP_HEADER)
    if granted is None:
        app = asked or default
        if app is None:
            raise ValidationError(f"name the app with {APP_HEADER} (auth is off)", field=APP_HEADER)
    elif asked:
        if asked not in granted:
            raise PermissionDeniedError(f"the API key does not grant access to app {asked!r}", field="app")
        app = asked
    elif len(granted) == 1:
        (app,) = granted
    else:
        raise ValidationError(f"the key opens several apps; name one with {APP_HEADER}", field=APP_HEADER)
    try:
        make_key(app, "-")
    except ValidationError as exc:
        raise ValidationError(str(exc), field=APP_HEADER) from None
    return app
