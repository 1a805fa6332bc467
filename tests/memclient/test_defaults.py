"""memclient installs alone (it cannot import memcore), so its default URL restates the server's default
port: this keeps the two the same."""

from __future__ import annotations

import inspect
from urllib.parse import urlsplit

from cluster.backup import DEFAULT_URL
from memclient import AsyncMemoryClient, MemoryClient
from memcore.settings import HttpSettings
from memcore.vocabulary import DEFAULT_PORT


def test_the_client_and_memctl_default_to_the_servers_port() -> None:
    assert HttpSettings().port == DEFAULT_PORT
    for client in (MemoryClient, AsyncMemoryClient):
        default = inspect.signature(client).parameters["base_url"].default
        assert urlsplit(default).port == DEFAULT_PORT and default == DEFAULT_URL
