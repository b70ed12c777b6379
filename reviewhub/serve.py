"""The web server: daphne, with its connection-timeout walk spread out and new connections admitted at the event
loop's pace. `python -m reviewhub.serve` takes daphne's own arguments.

daphne walks every open connection every two seconds (`Server.timeout_checker`): each connection checks its
timeouts and sends the WebSocket ping it has due. With 5,000 agent sockets one walk held the event loop for tens
of milliseconds, and every push due meanwhile waited for it: the push bench's slowest frames came in a burst every
two seconds (BENCHMARKS.md #3). Here each tick walks a tenth of the connections open when the round began, ten
times as often, so the loop is held a tenth as long; each connection is checked once per 2 s round (a new one from
the next round), so at most 4 s apart. daphne names its server class on its command-line class
(`CommandLineInterface.server_class`) for this kind of change.

New connections are read at once while the loop keeps time, and wait unread otherwise (ConnectionAdmission): in a
reconnect storm the handshakes no longer hold up the answers of connections already open (BENCHMARKS.md #11).
"""

from collections import deque
from typing import Any

from daphne.cli import CommandLineInterface
from daphne.server import Server
from twisted.internet import reactor as twisted_reactor

# Twisted's reactor is typed through zope interfaces, whose methods declare no `self`: mypy misreads callLater.
reactor: Any = twisted_reactor
TIMEOUT_CHECK_SECONDS = 2.0  # daphne's pace: one round over every connection
TIMEOUT_CHECK_SLICES = 10
ADMISSION_TICK_SECONDS = 0.02
ADMISSION_LAG_LIMIT_SECONDS = 0.05  # the loop's lateness past which new connections wait, unread
ADMISSIONS_PER_TICK = 10  # while the loop is on time: up to 500 new connections a second
ADMISSIONS_PER_LATE_TICK = 1  # while it is late: still some, so waiting connections always move
# The loop's pace is watched this long after the last new connection (and while any wait): an idle process does not
# wake 50 times a second for it.
ADMISSION_WATCH_SECONDS = 1.0


class ConnectionAdmission:
    """New connections are read only while the event loop keeps time; the others wait, unread, in arrival order.

    After a process dies its thousands of agents reconnect to the survivors within seconds. Each handshake's HTTP
    parsing and WebSocket upgrade run on the event loop (daphne's and autobahn's code, before ReviewHub's), so the
    loop ran up to a second late and every answer committed meanwhile waited behind the handshakes. Here a new
    connection is paused (its bytes stay in the kernel) while others wait or the loop runs more than
    ADMISSION_LAG_LIMIT_SECONDS late, and is resumed at a bounded pace: connections already open (reviewers' and
    answering agents' keep-alive connections, sockets) are served first, and a reconnecting client waits for its
    turn instead of being refused and backing off."""

    def __init__(self, clock: Any = reactor) -> None:
        self.clock = clock
        self.waiting: deque[Any] = deque()
        self.admitted_this_tick = 0
        self.loop_lag = 0.0
        self.ticking = False
        self.watch()

    def watch(self) -> None:
        """Tick (measure the loop's lateness, let waiting connections in) until ADMISSION_WATCH_SECONDS after this."""
        self.watch_until = self.clock.seconds() + ADMISSION_WATCH_SECONDS
        if not self.ticking:
            self.ticking = True
            self.clock.callLater(
                ADMISSION_TICK_SECONDS, self.tick, self.clock.seconds() + ADMISSION_TICK_SECONDS
            )

    def arrived(self, transport: Any) -> None:
        self.watch()
        on_time = self.loop_lag <= ADMISSION_LAG_LIMIT_SECONDS
        if on_time and not self.waiting and self.admitted_this_tick < ADMISSIONS_PER_TICK:
            self.admitted_this_tick += 1
            return
        transport.pauseProducing()
        self.waiting.append(transport)

    def tick(self, due: float) -> None:
        now = self.clock.seconds()
        self.loop_lag = max(0.0, now - due)
        on_time = self.loop_lag <= ADMISSION_LAG_LIMIT_SECONDS
        self.admitted_this_tick = 0
        room = ADMISSIONS_PER_TICK if on_time else ADMISSIONS_PER_LATE_TICK
        while self.waiting and self.admitted_this_tick < room:
            self.waiting.popleft().resumeProducing()  # a no-op for one its client closed meanwhile
            self.admitted_this_tick += 1
        if self.waiting or now < self.watch_until:
            self.clock.callLater(ADMISSION_TICK_SECONDS, self.tick, now + ADMISSION_TICK_SECONDS)
        else:  # quiet: the next new connection starts the ticks again, read at once at the last lateness seen
            self.ticking = False


class PacedConnection:
    """Mixed into a listening port's connection class: each new connection reports to the admission once built."""

    admission: ConnectionAdmission

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # twisted's connection starts reading its socket here
        self.admission.arrived(self)


def paced_transport(transport_class: type, admission: ConnectionAdmission) -> type[PacedConnection]:
    return type(
        f"Paced{transport_class.__name__}", (PacedConnection, transport_class), {"admission": admission}
    )


class SpreadServer(Server):  # type: ignore[misc]  # daphne ships no type hints
    this_round: list[Any] = []  # the connections open when the current round began
    next_slice = 0

    def timeout_checker(self) -> None:
        if self.next_slice == 0:
            self.this_round = list(self.connections)
            if not self.this_round:  # nothing to walk: look again in a round, as daphne does
                reactor.callLater(TIMEOUT_CHECK_SECONDS, self.timeout_checker)
                return
        for protocol in self.this_round[self.next_slice :: TIMEOUT_CHECK_SLICES]:
            if protocol in self.connections:  # not closed and reaped since the round began
                protocol.check_timeouts()
        self.next_slice = (self.next_slice + 1) % TIMEOUT_CHECK_SLICES
        reactor.callLater(TIMEOUT_CHECK_SECONDS / TIMEOUT_CHECK_SLICES, self.timeout_checker)

    def listen_success(self, port: Any) -> None:
        super().listen_success(port)
        if not hasattr(self, "admission"):
            self.admission = ConnectionAdmission()
        # A listening port builds each accepted connection from its `transport` class (twisted's tcp.Port and
        # unix.Port both do), which starts reading the socket at once.
        if hasattr(port, "transport"):
            port.transport = paced_transport(port.transport, self.admission)


class ReviewHubCommandLine(CommandLineInterface):  # type: ignore[misc]
    server_class = SpreadServer


def main() -> None:
    ReviewHubCommandLine.entrypoint()


if __name__ == "__main__":
    main()
