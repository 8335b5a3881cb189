"""Moved to :mod:`tocsin.testing.dispatch`; this path stays for existing imports."""
from tocsin.testing.dispatch import (  # noqa: F401
    assert_each_delivered_under_one_id,
    dispatcher_env,
    file_store,
    read_lines,
    running_dispatcher,
    running_expander,
    schedule_burst,
    wait_for_polls,
    wait_until,
)
