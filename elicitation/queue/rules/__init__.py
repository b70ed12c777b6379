"""Answer rules: a queue's policy as data. Ordered rules match a request on its agent, MCP server, tool, argument
values, schema fingerprint and message, and act: accept with given content, decline, cancel, route to another
queue, require a quorum, set priority or deadline.

A rule file (YAML, or the same shape as JSON through the API)::

    mode: human                 # or scripted: rules answer every request at once (agent CI)
    unmatched: decline          # scripted mode: decline what no rule answers (or leave it pending)
    round_cap: 5                # scripted mode: input-required rounds answered per tool call
    quorum: {approvals: 2, groups: {sre: 1}, exclude_owner: true, veto: any}
    rules:
      - name: read-only tools need nobody
        match: {tool: {in: [list_files, read_file]}}
        action: accept
        content: {approve: true}
      - name: large payments need two
        match: {tool: pay, arguments: {amount: {gt: 1000}}}
        action: require_quorum
        quorum: {approvals: 2}

A condition is a scalar (equals), a list (in) or a mapping of operators that must all hold: `eq`, `in`, `lt`,
`lte`, `gt`, `gte` (finite numbers only) and `regex` (strings only, searched, on RE2: no lookarounds or
backreferences, and values over 4,096 characters are not matched). Evaluation walks the rules in order: `set` and
`require_quorum` apply and go on; `route` moves the request and continues with the target queue's rules;
`accept`, `decline` and `cancel` decide. An `accept` whose content does not satisfy the request's schema never
decides: it is skipped (and audited) and the walk goes on, so the request falls through to a person. A rule that
cannot be evaluated or applied (a route into a queue the agent may not post to, a value too long for its regex)
stops the walk, audited: nothing after it decides.

A rule is checked against who writes it: a `route` targets only a queue the writer supervises (staff: any; the
operator at `manage.py import_rules`: any, or as `--as USER`).

One module per concern; the transitions that apply a decision live in transitions.py:

- `facts.py`: what a request is, to a rule (RequestFacts from a request's context) and the digest a decision is
  bound to.
- `validation.py`: a rule file's data checked, every offending field path named, as RuleSpec and PolicySpec; its
  shape is the JSON Schema in `rule_file_schema.py`.
- `storage.py`: rules and policies written as rows (each change bumps the queue's rules version, so cached
  compilations go stale) and read back as a rule file's data.
- `yaml_files.py`: the rule file as text: YAML out; YAML or JSON in through `load_rule_file`, which checks size
  and nesting depth before the parser builds anything (every door calls it).
- `engine.py`: rules compiled (cached per queue and rules version) and evaluated for a request about to be stored.
- `remembered.py`: remembered decisions, an answer a person gave turned into a rule that expires.
- `fixtures.py`: fixtures for agent CI, what people answered as rules a scripted queue replays.

Callers use the names below as `rules.<name>`; the rest is reached at its module.
"""

from elicitation.queue.rules.engine import IntakeDecision, intake_decision
from elicitation.queue.rules.facts import context_call, request_digest, request_digest_of, schema_fingerprint
from elicitation.queue.rules.fixtures import fixture_from_answers
from elicitation.queue.rules.remembered import (
    REMEMBER_OPERATORS,
    preview_matches,
    remember_decision,
    remembered_decisions,
    remembered_rule_data,
)
from elicitation.queue.rules.storage import (
    add_rule,
    delete_rule,
    policy_data,
    queue_policy,
    replace_policy,
    revoke_rule,
    rule_data,
    rules_changed,
    update_rule,
)
from elicitation.queue.rules.validation import parse_policy, parse_rule
from elicitation.queue.rules.yaml_files import MAX_RULE_FILE_BYTES, dump_yaml, load_rule_file, load_yaml

__all__ = [
    "MAX_RULE_FILE_BYTES",
    "REMEMBER_OPERATORS",
    "IntakeDecision",
    "add_rule",
    "context_call",
    "delete_rule",
    "dump_yaml",
    "fixture_from_answers",
    "intake_decision",
    "load_rule_file",
    "load_yaml",
    "parse_policy",
    "parse_rule",
    "policy_data",
    "preview_matches",
    "queue_policy",
    "remember_decision",
    "remembered_decisions",
    "remembered_rule_data",
    "replace_policy",
    "request_digest",
    "request_digest_of",
    "revoke_rule",
    "rule_data",
    "rules_changed",
    "schema_fingerprint",
    "update_rule",
]
