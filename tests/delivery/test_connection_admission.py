"""reviewhub/serve.py's admission of new connections: read at once while the event loop keeps time, otherwise held
unread in arrival order and let in at a bounded pace, so a reconnect storm cannot hold up connections already open.
Driven on twisted's deterministic clock: a tick that runs late is a loop running late."""

from typing import Any

from twisted.internet import tcp
from twisted.internet.task import Clock

from reviewhub import serve
from reviewhub.serve import (
    ADMISSION_LAG_LIMIT_SECONDS,
    ADMISSION_TICK_SECONDS,
    ADMISSION_WATCH_SECONDS,
    ADMISSIONS_PER_LATE_TICK,
    ADMISSIONS_PER_TICK,
    ConnectionAdmission,
    paced_transport,
)


class FakeTransport:
    """A connection as twisted's tcp.Server is to the admission: it reads until paused."""

    def __init__(self, name: int) -> None:
        self.name = name
        self.reading = True

    def pauseProducing(self) -> None:
        self.reading = False

    def resumeProducing(self) -> None:
        self.reading = True


def arrive(admission: ConnectionAdmission, count: int, first: int = 0) -> list[FakeTransport]:
    transports = [FakeTransport(first + n) for n in range(count)]
    for transport in transports:
        admission.arrived(transport)
    return transports


def reading(transports: list[FakeTransport]) -> list[int]:
    return [t.name for t in transports if t.reading]


def on_time_tick(clock: Clock) -> None:
    clock.advance(ADMISSION_TICK_SECONDS)


def late_tick(clock: Clock) -> None:
    clock.advance(ADMISSION_TICK_SECONDS + ADMISSION_LAG_LIMIT_SECONDS + 0.01)


def test_on_time_a_burst_is_read_up_to_a_ticks_pace_and_the_rest_the_next_ticks_in_arrival_order() -> None:
    clock = Clock()
    admission = ConnectionAdmission(clock)
    burst = arrive(admission, ADMISSIONS_PER_TICK * 2 + 3)

    assert reading(burst) == list(range(ADMISSIONS_PER_TICK))
    on_time_tick(clock)
    assert reading(burst) == list(range(ADMISSIONS_PER_TICK * 2))
    on_time_tick(clock)
    assert reading(burst) == list(range(len(burst)))
    assert not admission.waiting


def test_while_the_loop_runs_late_new_connections_wait_and_move_one_a_tick_then_at_full_pace_once_on_time() -> (
    None
):
    clock = Clock()
    admission = ConnectionAdmission(clock)
    late_tick(clock)
    assert admission.loop_lag > ADMISSION_LAG_LIMIT_SECONDS

    arrivals = arrive(admission, 30)
    assert reading(arrivals) == []  # a late loop reads no new connection at once

    late_tick(clock)
    late_tick(clock)
    assert reading(arrivals) == list(range(2 * ADMISSIONS_PER_LATE_TICK))

    on_time_tick(clock)
    assert reading(arrivals) == list(range(2 * ADMISSIONS_PER_LATE_TICK + ADMISSIONS_PER_TICK))
    assert admission.loop_lag <= ADMISSION_LAG_LIMIT_SECONDS


def test_a_connection_arriving_on_time_behind_waiting_ones_waits_its_turn() -> None:
    clock = Clock()
    admission = ConnectionAdmission(clock)
    late_tick(clock)
    earlier = arrive(admission, 3)
    on_time_tick(clock)  # all three let in; the loop keeps time again
    assert reading(earlier) == [0, 1, 2]

    late_tick(clock)
    queued = arrive(admission, 2, first=10)
    on_time_tick(clock)
    later = arrive(admission, ADMISSIONS_PER_TICK, first=20)
    # The two queued ones went first; the newcomers fill the tick's remaining room, and one waits.
    assert reading(queued) == [10, 11]
    assert reading(later) == list(range(20, 20 + ADMISSIONS_PER_TICK - 2))
    assert [t.name for t in admission.waiting] == [28, 29]


def test_a_quiet_process_stops_ticking_and_the_next_connection_starts_the_ticks_again() -> None:
    clock = Clock()
    admission = ConnectionAdmission(clock)
    for _ in range(int(ADMISSION_WATCH_SECONDS / ADMISSION_TICK_SECONDS) + 1):
        on_time_tick(clock)
    assert clock.getDelayedCalls() == []  # nothing arrived, nothing waits: no wake-ups 50 times a second

    first = arrive(admission, ADMISSIONS_PER_TICK + 1)
    assert reading(first) == list(range(ADMISSIONS_PER_TICK))  # on time when it went quiet: read at once
    assert len(clock.getDelayedCalls()) == 1
    on_time_tick(clock)
    assert reading(first) == list(range(ADMISSIONS_PER_TICK + 1))


def test_it_keeps_ticking_while_connections_wait_however_long_ago_they_arrived() -> None:
    clock = Clock()
    admission = ConnectionAdmission(clock)
    late_tick(clock)
    waiting = arrive(admission, 200)
    ticks = 0
    while admission.waiting:
        late_tick(clock)  # one a tick while late: 200 ticks, far past the watch window
        ticks += 1
    assert ticks == 200 // ADMISSIONS_PER_LATE_TICK
    assert reading(waiting) == list(range(200))


def test_the_listening_ports_connection_class_reports_each_connection_after_it_is_built() -> None:
    clock = Clock()
    admission = ConnectionAdmission(clock)
    late_tick(clock)

    class Connection(FakeTransport):
        def __init__(self, name: int, protocol: Any) -> None:
            super().__init__(name)
            self.protocol = protocol

    paced = paced_transport(Connection, admission)
    connection = paced(7, protocol="http")

    assert isinstance(connection, Connection) and connection.protocol == "http"
    assert not connection.reading and list(admission.waiting) == [connection]


def test_the_served_server_paces_its_tcp_listeners(monkeypatch: Any) -> None:
    """What daphne's listen callback does to a twisted TCP port: its connections are paced from then on."""

    class Port:
        transport: Any = tcp.Server

        def getHost(self) -> Any:
            return None

    server = serve.SpreadServer.__new__(serve.SpreadServer)
    server.listening_addresses = []
    monkeypatch.setattr(serve, "ConnectionAdmission", lambda: ConnectionAdmission(Clock()))
    first, second = Port(), Port()
    server.listen_success(first)
    server.listen_success(second)

    assert isinstance(server.admission, ConnectionAdmission)
    for port in (first, second):  # both listeners report to the process's one admission
        assert issubclass(port.transport, tcp.Server) and port.transport is not tcp.Server
        assert port.transport.admission is server.admission
