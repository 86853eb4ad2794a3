"""`rules new`: the files a new symptom needs, with comments that say what goes where."""

from __future__ import annotations

import re
from pathlib import Path

from ..kb.models import ID_PATTERN

SIGNATURE = """\
# One log message. The id is the path below signatures/ with dots: {sig_id}
id: {sig_id}
title: "TODO(rltriage) what the message says, in a few words"
status: experimental          # stable once it has matched real logs
# The library file or document section the message comes from, e.g.
# "library-messages.md §2 — torch ProcessGroupNCCL.cpp" or a public issue URL.
source: "TODO(rltriage) where the message comes from"
references: []
# The message as the library prints it. Match the message itself, not the prefixes in front of
# it (timestamps, `[rank3]:`, Ray's `(WorkerDict pid=…)` are removed before matching). Name every
# number the fix needs as a group and give its type below.
pattern: 'TODO\\(rltriage\\) exact message text (?P<value>\\d+)'
values:
  value: int                  # str int float size version duration
examples:
  match:                      # real log lines, with the values the groups must extract
    - line: '[rank0]: TODO(rltriage) exact message text 42'
      values: {{value: 42}}
  no_match:                   # near misses that must not match
    - 'TODO(rltriage) a similar line that means something else'
"""

RULE = """\
# One failure. The id is the path below rules/ with dots: {rule_id}
id: {rule_id}
title: "TODO(rltriage) the failure, as an operator would name it"
# What the rule is for: evidence (concludes a cause), contract (a config or environment contract;
# the only role that may set blocking: true), support, guard, stage, boundary, derive, generic.
role: evidence
status: experimental
source: "TODO(rltriage) the document section or public issue the fix comes from"
bucket: {bucket}
symptom: hang                 # hang oom crash error_at_startup slow wrong_result
issue: "TODO(rltriage) what the operator sees"
reason: "TODO(rltriage) why it happens"
when:
  all:
    - hit: {sig_id}          # the signature above; `as` names it for templates
      as: msg
then:
  evidence:
    weight: 0.7               # 0.7-0.9 decisive, 0.4-0.6 strong but indirect, 0.1-0.3 context
fix_template: fixes/{namespace}/{name}.md.j2
patch_plan:                   # exact keys, env vars, files; templates see the run's values
  - kind: config              # config env file command package
    target: "TODO(rltriage) config key"
    change: "TODO(rltriage) from {{{{ msg.value }}}} to …"
verify:
  - "TODO(rltriage) what a rerun shows when the fix worked"
"""

TEMPLATE = """\
{{# The fix, in Markdown. Each alias of the rule is a mapping of its fact's fields; cfg('key') gives
    the run's config value, cfg_key('key') the key as the run spells it. Undefined names fail lint. #}}
TODO(rltriage) the smallest change, using the value from the log: {{{{ msg.value }}}}.
"""

EXPECT_FIRES = """\
description: "TODO(rltriage) a run where {rule_id} is the cause"
primary_bucket: {bucket}
first_cause: {rule_id}
cites: [run.log:3]            # file:line of the decisive line
fires: [{rule_id}]
report_contains: []
"""

EXPECT_QUIET = """\
description: "TODO(rltriage) a similar run where {rule_id} must not fire (a near miss)"
fires: []
not_fires: [{rule_id}]
"""

LOG_FIRES = """\
2025-01-01 00:00:00 - INFO - TODO(rltriage) paste a redacted excerpt of the real log here
2025-01-01 00:00:01 - INFO - keep the noise around the decisive line
[rank0]: TODO(rltriage) exact message text 42
"""

LOG_QUIET = """\
2025-01-01 00:00:00 - INFO - TODO(rltriage) paste a redacted excerpt of a run without the failure
"""


def scaffold(pack: Path, item_id: str, bucket: str) -> list[Path]:
    if not re.match(ID_PATTERN, item_id) or item_id.count(".") != 1:
        raise ValueError(f"id '{item_id}' must be NAMESPACE.NAME in lower case")
    namespace, name = item_id.split(".")
    # Fixtures are nested by the namespace of the rule they are about, so the id leads to them.
    fixtures = pack / "fixtures" / namespace
    files = {
        pack / "signatures" / namespace / f"{name}.yaml": SIGNATURE,
        pack / "rules" / namespace / f"{name}.yaml": RULE,
        pack / "templates" / "fixes" / namespace / f"{name}.md.j2": TEMPLATE,
        fixtures / name / "expect.yaml": EXPECT_FIRES,
        fixtures / name / "run.log": LOG_FIRES,
        fixtures / f"{name}_quiet" / "expect.yaml": EXPECT_QUIET,
        fixtures / f"{name}_quiet" / "run.log": LOG_QUIET,
    }
    existing = [p for p in files if p.exists()]
    if existing:
        raise ValueError(f"{existing[0]} exists already; ids are never reused")
    values = {"sig_id": item_id, "rule_id": item_id, "bucket": bucket, "namespace": namespace, "name": name}
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.format(**values), encoding="utf-8")
    return sorted(files)
