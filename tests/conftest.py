"""Test-wide settings. On CI (CI=true) hypothesis draws the same examples on every run, so a
red run always means a change broke something; locally it keeps exploring new examples."""
import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
settings.register_profile("dev", deadline=None, print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") else "dev")
