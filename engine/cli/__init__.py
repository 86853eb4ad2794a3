"""The command line: click commands only, a thin layer over the library that does the printing.

Exit codes: 0 diagnosis produced, 1 blocking problem or failing check, 2 usage or unreadable
input, 3 knowledge-base error, 4 `watch` saw a stall (see `common`).
"""

from __future__ import annotations

from .app import main
from .batch import batch_command
from .diagnose import diagnose, explain_command, preflight
from .diff import diff_command
from .rules import rules
from .schema import schema_command
from .smoke import smoke_command
from .verify import verify_command
from .watch import watch_command

for _command in (diagnose, preflight, schema_command, rules, explain_command, batch_command, watch_command, verify_command, smoke_command, diff_command):
    main.add_command(_command)

__all__ = ["main"]
