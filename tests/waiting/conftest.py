"""The waiting tests reuse the delivery tests' sockets and reviewer."""

from tests.delivery.conftest import answer, open_socket

__all__ = ["answer", "open_socket"]
