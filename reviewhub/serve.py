"""The web server: daphne, with its connection-timeout walk spread out. `python -m reviewhub.serve` takes daphne's
own arguments.

daphne walks every open connection every two seconds (`Server.timeout_checker`): each connection checks its
timeouts and sends the WebSocket ping it has due. With 5,000 agent sockets one walk held the event loop for tens
of milliseconds, and every push due meanwhile waited for it: the push bench's slowest frames came in a burst every
two seconds (BENCHMARKS.md #3). Here each tick walks a tenth of the connections open when the round began, ten
times as often, so the loop is held a tenth as long; each connection is checked once per 2 s round (a new one from
the next round), so at most 4 s apart. daphne names its server class on its command-line class
(`CommandLineInterface.server_class`) for this kind of change.
"""

from typing import Any

from daphne.cli import CommandLineInterface
from daphne.server import Server
from twisted.internet import reactor as twisted_reactor

# Twisted's reactor is typed through zope interfaces, whose methods declare no `self`: mypy misreads callLater.
reactor: Any = twisted_reactor
TIMEOUT_CHECK_SECONDS = 2.0  # daphne's pace: one round over every connection
TIMEOUT_CHECK_SLICES = 10


class SpreadServer(Server):  # type: ignore[misc]  # daphne ships no type hints
    this_round: list[Any] = []  # the connections open when the current round began
    next_slice = 0

    def timeout_checker(self) -> None:
        if self.next_slice == 0:
            self.this_round = list(self.connections)
        for protocol in self.this_round[self.next_slice :: TIMEOUT_CHECK_SLICES]:
            if protocol in self.connections:  # not closed and reaped since the round began
                protocol.check_timeouts()
        self.next_slice = (self.next_slice + 1) % TIMEOUT_CHECK_SLICES
        reactor.callLater(TIMEOUT_CHECK_SECONDS / TIMEOUT_CHECK_SLICES, self.timeout_checker)


class ReviewHubCommandLine(CommandLineInterface):  # type: ignore[misc]
    server_class = SpreadServer


def main() -> None:
    ReviewHubCommandLine.entrypoint()


if __name__ == "__main__":
    main()
