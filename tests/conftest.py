"""Session-wide settings for every test under tests/."""

from __future__ import annotations

import os

from dualpath.report.schema import VALIDATE_ENV

# Every report a runtime builds during the tests is checked against docs/report.schema.json
# (dualpath.report.schema.check_report), in this process and in every CLI or service process
# a test starts (they inherit the environment): an undocumented key fails loudly.
os.environ[VALIDATE_ENV] = "1"
