"""An email, uri, date or date-time answer ReviewHub accepts is accepted by both official MCP SDKs too.

The agent's SDK checks an accepted answer again, after ReviewHub has closed the request: an answer it refuses fails
the agent's tool call and the reviewer's work never arrives. The two checks these tests hold ReviewHub to:

- TypeScript: `Server.elicitInput` runs the SDK's `AjvJsonSchemaValidator` (ajv + ajv-formats, "full" mode) over
  the content; `ajv_formats_check.mjs` runs that very class in Node, from the TypeScript client's node_modules.
- Python: the session parses the reply as `ElicitResult` (value types only), then `ctx.elicit(schema=Model)`
  (`elicit_with_validation`) validates it with the server's pydantic model: `date`, `datetime` and `AnyUrl` fields
  are what render as these formats. pydantic's `EmailStr` needs the optional email-validator package, which the SDK
  does not install: without it a Python server's e-mail question is a string the SDK does not check.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Annotated, Any, Literal, cast

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from mcp.server.elicitation import AcceptedElicitation, elicit_with_validation, render_elicitation_schema
from mcp.server.session import ServerSession
from mcp.types import ElicitResult
from pydantic import AnyUrl, BaseModel, Field
from rest_framework.test import APIClient

from elicitation.models import ElicitationRequest, Status
from elicitation.queue.schemas import (
    TEXT_FORMATS,
    AnswerInvalid,
    parse_requested_schema,
    validate_answer,
    validate_content,
)

pytestmark = pytest.mark.mcp

AJV_CHECK = Path(__file__).with_name("ajv_formats_check.mjs")
INSTALL_HINT = "run `make clients/typescript/node_modules/.installed` (npm ci in clients/typescript)"
# The e-mail answers ReviewHub recorded and the TypeScript SDK then refused (-32602 … must match format "email").
ANSWERS_THE_TYPESCRIPT_SDK_REFUSED = [
    ("first..last@example.com", "(no dot at the start or end of the name, nor two in a row)"),
    ("first.last@exa_mple.com", "(“_” is not allowed after the @)"),
    ("josé@example.com", "(“é” is not allowed before the @)"),
    ("a(b)@example.com", "(“(” is not allowed before the @)"),
]


class TypeScriptSdk:
    """One Node process running the TypeScript SDK's answer check, asked line by line."""

    def __init__(self, process: subprocess.Popen[str], errors: IO[str]) -> None:
        self.process = process
        self.errors = errors

    def problem(self, text_format: str, value: str) -> str | None:
        """ajv's error for `value`, or None when the SDK accepts it."""
        assert self.process.stdin is not None and self.process.stdout is not None
        # ASCII JSON: every character, U+2028 and all, travels as an escape and cannot split the line.
        self.process.stdin.write(json.dumps({"format": text_format, "value": value}) + "\n")
        self.process.stdin.flush()
        reply = self.process.stdout.readline()
        if not reply:
            pytest.fail(f"the TypeScript SDK's check stopped:\n{self.stderr()}")
        answer = json.loads(reply)
        return None if answer["accepted"] else str(answer["error"])

    def stderr(self) -> str:
        self.errors.seek(0)
        return self.errors.read()


@pytest.fixture(scope="module")
def typescript_sdk() -> Iterator[TypeScriptSdk]:
    node = shutil.which("node")
    if node is None:
        pytest.fail("Node.js 20+ must be on PATH: the TypeScript SDK's format check runs in it")
    with tempfile.TemporaryFile("w+", encoding="utf-8") as errors:
        process = subprocess.Popen(
            [node, str(AJV_CHECK)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
            encoding="utf-8",
        )
        sdk = TypeScriptSdk(process, errors)
        try:
            assert process.stdout is not None
            if not process.stdout.readline().startswith('{"ready":true'):
                process.wait(timeout=10)
                pytest.fail(f"the TypeScript SDK could not be loaded; {INSTALL_HINT}:\n{sdk.stderr()}")
            yield sdk
        finally:
            if process.stdin is not None:
                process.stdin.close()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            if process.stdout is not None:
                process.stdout.close()


class EmailAnswer(BaseModel):
    answer: Annotated[str, Field(json_schema_extra={"format": "email"})]


class UriAnswer(BaseModel):
    answer: AnyUrl


class DateAnswer(BaseModel):
    answer: datetime.date


class DateTimeAnswer(BaseModel):
    answer: datetime.datetime


PYTHON_SERVER_MODELS: dict[str, type[BaseModel]] = {
    "email": EmailAnswer,
    "uri": UriAnswer,
    "date": DateAnswer,
    "date-time": DateTimeAnswer,
}


class AnsweringClient:
    """Stands in for a Python server's `ServerSession`: the client's reply is parsed as the session parses it
    (`ElicitResult.model_validate(result, by_name=False)`)."""

    def __init__(self, content: dict[str, Any]) -> None:
        self.reply = {"action": "accept", "content": content}

    async def elicit_form(
        self, message: str, requested_schema: dict[str, Any], related_request_id: object = None
    ) -> ElicitResult:
        return ElicitResult.model_validate(self.reply, by_name=False)


def python_sdk_reading(model: type[BaseModel], content: dict[str, Any]) -> BaseModel:
    """What `ctx.elicit(schema=model)` returns to a Python server whose user answered `content`."""
    session = cast(ServerSession, AnsweringClient(content))
    result = asyncio.run(elicit_with_validation(session, "Your answer?", model))
    assert isinstance(result, AcceptedElicitation)
    return result.data


def python_sdk_problem(text_format: str, value: str) -> str | None:
    try:
        python_sdk_reading(PYTHON_SERVER_MODELS[text_format], {"answer": value})
    except ValueError as error:  # pydantic's ValidationError is one
        return str(error.__cause__ or error)
    return None


def reviewhub_problem(text_format: str, value: str) -> str | None:
    [question] = parse_requested_schema(
        {"type": "object", "properties": {"answer": {"type": "string", "format": text_format}}}
    )
    try:
        validate_answer(question, value)
    except AnswerInvalid as invalid:
        return invalid.errors["answer"]
    return None


# ---------------------------------------------------------------------------------------------------
# Strings built from the pieces the formats are made of: well-formed, or with one odd piece (so a good share is
# accepted and the check has something to hold to); and plain random text
# ---------------------------------------------------------------------------------------------------

Piece = tuple[st.SearchStrategy[str], st.SearchStrategy[str]]


@st.composite
def assembled(draw: st.DrawFn, pieces: list[Piece]) -> str:
    """The pieces' usual values in order, one of them (about half the time) replaced by an odd value."""
    odd_at = draw(st.integers(min_value=-len(pieces), max_value=len(pieces) - 1))
    return "".join(draw(odd if index == odd_at else usual) for index, (usual, odd) in enumerate(pieces))


def fixed(text: str, *odd: str) -> Piece:
    return st.just(text), st.sampled_from(odd)


def one_of_these(usual: list[str], odd: list[str]) -> Piece:
    return st.sampled_from(usual), st.sampled_from(odd)


def with_one_of(usual: st.SearchStrategy[str], odd_pieces: list[str]) -> st.SearchStrategy[str]:
    """A usual value with an odd piece put into it."""
    return st.builds(
        lambda text, at, odd: text[:at] + odd + text[at:],
        usual,
        st.integers(0, 8),
        st.sampled_from(odd_pieces),
    )


# Characters that look like ASCII to a case-insensitive or Unicode-aware regex: the long s and dotless i
# upper-case to S and I, the Kelvin sign lower-cases to k, Arabic-Indic and full-width digits are \d in Python.
LOOK_ALIKES = ["\u017f", "\u0131", "\u0130", "\u212a", "\u0661", "\uff12", "\u00e9", "\u00df"]
ATOM = "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]{1,6}"
LABEL = "[a-z0-9](?:[a-zA-Z0-9-]{0,6}[a-z0-9])?"
ODD_LOCAL_PIECES = [*LOOK_ALIKES, *'()"\\ ,;:<>[]@\t\n', ".", ".."]
ODD_HOST_PIECES = [*LOOK_ALIKES, "_", "%41", "%2e", "%zz", "%00", " ", "XN--", "xn--", ".", "..", "-", "\\"]


def email_candidates() -> st.SearchStrategy[str]:
    local_part = st.from_regex(rf"{ATOM}(?:\.{ATOM}){{0,2}}", fullmatch=True)
    domain = st.from_regex(rf"(?:{LABEL}\.){{1,3}}{LABEL}", fullmatch=True)
    odd_domains = ["[127.0.0.1]", "[IPv6:::1]", "localhost", "example.com.", "xn--a.com", "xn--nxasmq6b.com"]
    built = assembled(
        [
            (local_part, with_one_of(local_part, ODD_LOCAL_PIECES)),
            fixed("@", "", "@@", " @"),
            (domain, with_one_of(domain, ODD_HOST_PIECES) | st.sampled_from(odd_domains)),
            fixed("", "\n", " ", "@x.io", "."),
        ]
    )
    return st.one_of(built, built, built, st.text(max_size=30))


SCHEMES = ["http", "https", "HTTPS", "mailto", "urn", "file", "ws", "wss", "ftp", "foo", "a+b.c-d", "x"]
ODD_SCHEMES = ["1http", "h_t", "ht tp", "\u00e9", "", "-a", "h\u0131"]
ODD_HOSTS = [
    "[::1]",
    "[::]",
    "[::ffff:1.2.3.4]",
    "[1::001.2.3.4]",
    "[1:2:3:4:5:6:7:8]",
    "[1:2:3:4:5:6:7:8:9]",
    "[fe80::1%25eth0]",
    "[v1.x]",
    "[V1.x]",
    "[:::]",
    "[::1",
    "xn--a.com",
    "xn--nxasmq6b.com",
    "XN--NXASMQ6B.com",
    "xn--",
    "a.xn--",
    "xn--ls8h.la",
    "%7a.com",
    "",
    "0x7f.1",
    "1.2.3.4.5",
    "256.1.1.1",
    "09",
    "a.09",
    "1e1",
]
PATH = "(?:/[A-Za-z0-9._~!$&'()*+,;=:@-]{0,6}){0,3}"
ODD_PATH_PIECES = [
    *LOOK_ALIKES,
    "%41",
    "%",
    "%zz",
    " ",
    "\\",
    '"',
    "<",
    "|",
    "^",
    "{",
    "[",
    "//",
    "#",
    "?",
    "\t",
]


def uri_candidates() -> st.SearchStrategy[str]:
    host = st.from_regex(rf"(?:{LABEL}\.){{0,2}}{LABEL}", fullmatch=True)
    ipv4 = st.lists(st.integers(0, 300).map(str), min_size=1, max_size=5).map(".".join)
    path = st.from_regex(PATH, fullmatch=True)
    hierarchical = assembled(
        [
            (st.sampled_from(SCHEMES), st.sampled_from(ODD_SCHEMES)),
            fixed("://", ":", ":/", ":///", "//", ":\\\\"),
            one_of_these(["", "", "user@", "u:p@"], [":@", "@", "a@b@", "\u00e9@", "u%20@", "u p@"]),
            (host, with_one_of(host, ODD_HOST_PIECES) | st.sampled_from(ODD_HOSTS) | ipv4),
            (
                st.sampled_from(["", "", ":8080", ":443"]),
                st.integers(0, 10**6).map(":{}".format) | st.sampled_from([":", ":a", ":00080"]),
            ),
            (path, with_one_of(path, ODD_PATH_PIECES)),
            one_of_these(["", "", "?q=1", "?a=b&c=%41"], ["?", "?a b", "?%zz", "?\u00e9", "?\\", "?a#b#c"]),
            one_of_these(["", "", "#f", "#/a?b"], ["#", "#a#b", "#%4", "#\u00e9"]),
            fixed("", "\n", " ", "\t"),
        ]
    )
    opaque = assembled(
        [
            (st.sampled_from(SCHEMES), st.sampled_from(ODD_SCHEMES)),
            fixed(":", "", "::"),
            (
                st.from_regex("[A-Za-z0-9._~!$&'()*+,;=:@-]{1,12}", fullmatch=True),
                st.sampled_from(["", "?q", "#f", *ODD_PATH_PIECES]),
            ),
        ]
    )
    return st.one_of(hierarchical, hierarchical, opaque, st.text(max_size=30))


def two_digits(low: int, high: int, odd_low: int, odd_high: int) -> Piece:
    """Two digits from low to high; odd: out of range, one or three digits, or digits that are not ASCII."""
    return (
        st.integers(low, high).map("{:02d}".format),
        st.integers(odd_low, odd_high).map("{:02d}".format)
        | st.sampled_from(["1", "001", "\u0661\u0662", "\uff11\uff12"]),
    )


def date_pieces() -> list[Piece]:
    return [
        (
            st.integers(1, 9999).map("{:04d}".format),
            st.sampled_from(["0000", "99", "10000", "\uff12\uff10\uff12\uff14"]),
        ),
        fixed("-", "/", "", " ", "--"),
        two_digits(1, 12, 0, 13),
        fixed("-", "/", "", " ", "--"),
        two_digits(1, 31, 0, 32),
    ]


def date_candidates() -> st.SearchStrategy[str]:
    built = assembled([*date_pieces(), fixed("", "\n", " ", "T00:00:00Z", "Z")])
    return st.one_of(
        built, built, built, st.text(alphabet="0123456789-/T: ", max_size=14), st.text(max_size=14)
    )


OFFSETS = ["Z", "z", "+00:00", "-00:00", "+05:30", "-12:00", "+23:59"]
ODD_OFFSETS = ["+24:00", "+23:60", "+0100", "+01", "", " Z", "+1:00", "Zz", "-00:60"]
FRACTIONS = ["", "", ".0", ".5", ".250", ".123456789"]
ODD_FRACTIONS = [".", ".1234567890123", ",5", ".\u0661", ".5.5"]


def date_time_candidates() -> st.SearchStrategy[str]:
    built = assembled(
        [
            *date_pieces(),
            one_of_these(["T", "t"], [" ", "_", "TT", "", "\n"]),
            two_digits(0, 23, 0, 25),
            fixed(":", "", "::", "."),
            two_digits(0, 59, 0, 60),
            fixed(":", "", "::", "."),
            two_digits(0, 59, 0, 61),
            one_of_these(FRACTIONS, ODD_FRACTIONS),
            one_of_these(OFFSETS, ODD_OFFSETS),
            fixed("", "\n", " "),
        ]
    )
    # Leap seconds: the one minute ajv allows them in (23:59 UTC, whatever the offset) and a few around it.
    leap_second = st.builds(
        "{}T{}:{}:60{}{}".format,
        st.dates().map(datetime.date.isoformat),
        st.sampled_from(["23", "00", "22", "05"]),
        st.sampled_from(["59", "29", "00"]),
        st.sampled_from(FRACTIONS),
        st.sampled_from(["Z", "+00:00", "+01:00", "-00:01", "+00:30", "-05:30"]),
    )
    return st.one_of(built, built, built, leap_second, st.text(alphabet="0123456789-:.TZz+ ", max_size=30))


CANDIDATES = {
    "email": email_candidates(),
    "uri": uri_candidates(),
    "date": date_candidates(),
    "date-time": date_time_candidates(),
}
SDK_PROPERTY_SETTINGS = settings(
    max_examples=400, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)


@pytest.mark.parametrize("text_format", TEXT_FORMATS)
@SDK_PROPERTY_SETTINGS
@given(data=st.data())
def test_every_answer_reviewhub_accepts_is_accepted_by_both_sdks(
    typescript_sdk: TypeScriptSdk, text_format: str, data: st.DataObject
) -> None:
    value = data.draw(CANDIDATES[text_format], label="answer")

    accepted = reviewhub_problem(text_format, value) is None
    event("accepted by ReviewHub" if accepted else "refused by ReviewHub")
    if accepted:
        refusals = {
            "TypeScript SDK (ajv)": typescript_sdk.problem(text_format, value),
            "Python SDK (pydantic)": python_sdk_problem(text_format, value),
        }
        assert refusals == {"TypeScript SDK (ajv)": None, "Python SDK (pydantic)": None}


# ---------------------------------------------------------------------------------------------------
# Examples
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "hint"), ANSWERS_THE_TYPESCRIPT_SDK_REFUSED)
def test_an_email_the_typescript_sdk_refuses_is_refused_on_the_field_saying_why(
    typescript_sdk: TypeScriptSdk, value: str, hint: str
) -> None:
    questions = parse_requested_schema(
        {"type": "object", "properties": {"contact": {"type": "string", "format": "email"}}}
    )

    with pytest.raises(AnswerInvalid) as refused:
        validate_content(questions, {"contact": value})

    assert refused.value.errors == {"contact": f"must be a valid email address {hint}"}
    assert typescript_sdk.problem("email", value) == 'data/answer must match format "email"'


@pytest.mark.django_db
def test_a_reviewer_answering_such_an_email_gets_a_400_on_the_field_and_keeps_the_claim(
    reviewer_client: APIClient, make_request: Any
) -> None:
    request = make_request(
        requested_schema={
            "type": "object",
            "properties": {"contact": {"type": "string", "format": "email"}},
            "required": ["contact"],
        }
    )
    reviewer_client.post(f"/api/v1/review/requests/{request.pk}/claim")

    response = reviewer_client.post(
        f"/api/v1/review/requests/{request.pk}/respond",
        {"action": "accept", "content": {"contact": "first..last@example.com"}},
        format="json",
    )

    assert response.status_code == 400
    assert response.json()["fields"] == {
        "content.contact": "must be a valid email address (no dot at the start or end of the name, nor two in a row)"
    }
    assert ElicitationRequest.objects.get(pk=request.pk).status == Status.CLAIMED


@pytest.mark.parametrize(
    ("text_format", "value"),
    [
        ("email", "reviewer@example.com"),
        ("email", "First.Last+tag@mail.example.co.uk"),
        ("email", "o'brien_x@host.io"),
        ("uri", "https://example.com/path?q=1#frag"),
        ("uri", "mailto:someone@example.com"),
        ("uri", "urn:isbn:0451450523"),
        ("uri", "http://[::1]:8080/"),
        ("uri", "https://xn--nxasmq6b.com/"),
        ("date", "2024-02-29"),
        ("date-time", "2025-06-18T12:00:00.250+05:30"),
        ("date-time", "2025-06-18t12:00:00z"),
    ],
)
def test_everyday_answers_are_accepted_by_reviewhub_and_both_sdks(
    typescript_sdk: TypeScriptSdk, text_format: str, value: str
) -> None:
    assert (
        reviewhub_problem(text_format, value),
        typescript_sdk.problem(text_format, value),
        python_sdk_problem(text_format, value),
    ) == (None, None, None)


@pytest.mark.parametrize(
    ("text_format", "value"),
    [
        ("uri", "mailto:"),  # ajv wants something after the scheme
        ("uri", "urn:?q"),
        ("uri", "http://example.com:65536/"),  # pydantic: ports end at 65535
        ("uri", "http://1.2.3.4.5/"),  # pydantic: a host ending in a number is an IPv4 address
        ("uri", "http://xn--a.com/"),  # pydantic: punycode that does not decode
        ("date-time", "2016-12-31T23:59:60Z"),  # pydantic: no leap seconds
    ],
)
def test_what_reviewhub_refuses_beyond_the_rfcs_is_what_one_of_the_sdks_refuses(
    typescript_sdk: TypeScriptSdk, text_format: str, value: str
) -> None:
    refusals = (typescript_sdk.problem(text_format, value), python_sdk_problem(text_format, value))

    assert reviewhub_problem(text_format, value) is not None
    assert refusals != (None, None)


@pytest.mark.parametrize("text_format", TEXT_FORMATS)
def test_these_pydantic_fields_are_how_a_python_server_asks_for_each_format(text_format: str) -> None:
    rendered = render_elicitation_schema(PYTHON_SERVER_MODELS[text_format])

    assert rendered["properties"]["answer"]["format"] == text_format


class Booking(BaseModel):
    contact: Annotated[str, Field(json_schema_extra={"format": "email"})]
    website: AnyUrl
    arrival: datetime.date
    call_at: datetime.datetime
    guests: int = Field(ge=1, le=8)
    room: Literal["single", "double"]
    breakfast: bool = False


def test_content_reviewhub_accepted_is_read_by_the_python_sdk_as_answered() -> None:
    questions = parse_requested_schema(render_elicitation_schema(Booking))
    answered = {
        "contact": "first.last@example.com",
        "website": "https://example.com/rooms?view=sea",
        "arrival": "2025-06-18",
        "call_at": "2025-06-17T09:30:00+02:00",
        "guests": 2,
        "room": "double",
    }

    content = validate_content(questions, answered)
    parsed = ElicitResult.model_validate({"action": "accept", "content": content}, by_name=False)
    booking = python_sdk_reading(Booking, content)

    assert parsed.content == answered
    assert booking == Booking(
        contact="first.last@example.com",
        website=AnyUrl("https://example.com/rooms?view=sea"),
        arrival=datetime.date(2025, 6, 18),
        call_at=datetime.datetime(2025, 6, 17, 9, 30, tzinfo=datetime.timezone(datetime.timedelta(hours=2))),
        guests=2,
        room="double",
    )
