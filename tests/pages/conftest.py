"""Page-test fixtures: logged-in Django test clients."""

from collections.abc import Callable

import pytest
from django.contrib.auth.models import User
from django.test import Client


@pytest.fixture
def login() -> Callable[[User], Client]:
    def make(user: User) -> Client:
        client = Client()
        client.force_login(user)
        return client

    return make
