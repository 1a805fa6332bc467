"""Which app and user a protocol endpoint without them in its path (MCP, Mem0) serves.

The API key selects the app: a key that opens one app selects it; one that opens several names it
with :data:`APP_HEADER` (an app the key does not open: 403); with auth off the header names the app,
else ``default`` (none: 422). The user of MCP requests comes from :data:`USER_HEADER`.
"""

from __future__ import annotations

from starlette.requests import Request

from memcore.errors import PermissionDeniedError, ValidationError
from memcore.validation import make_key
from serve_apps.http_access import granted_apps

APP_HEADER = "X-Memcluster-App"
USER_HEADER = "X-Memcluster-User"


def resolve_app(request: Request, schemes: tuple[str, ...], default: str | None) -> str:
    """The app of the request (see the module docstring); 401 / 403 / 422 as the API's errors."""
    granted = granted_apps(request, schemes)
    asked = request.headers.get(APP_HEADER)
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
