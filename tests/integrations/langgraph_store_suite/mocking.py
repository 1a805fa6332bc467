"""``mocker.spy`` of pytest-mock (the one call the vendored suites make) over :mod:`unittest.mock`."""

from __future__ import annotations

from typing import Any
from unittest import mock


class Mocker:
    """``mocker.spy`` of pytest-mock: wraps a class's method, records calls, undone after the test."""

    def __init__(self) -> None:
        self._patches: list[Any] = []

    def spy(self, owner: Any, name: str) -> Any:
        patch = mock.patch.object(owner, name, autospec=True, side_effect=getattr(owner, name))
        self._patches.append(patch)
        return patch.start()

    def stop(self) -> None:
        for patch in reversed(self._patches):
            patch.stop()


MockerFixture = Mocker
