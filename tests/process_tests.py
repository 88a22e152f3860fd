"""The ``processes`` marker: tests that start real processes, left out of the quick loop ``-m "not processes"``.

Marked here by node id (a module, or one test of a module) rather than in each file. A test that starts a process
(``subprocess``, asyncio's subprocesses, ``os.fork``...) without the marker fails, so the quick loop stays quick
and the list stays right: the interpreter's audit events name every process start.
"""

from __future__ import annotations

import contextlib
import platform
import sys
from collections.abc import Iterator
from pathlib import PurePosixPath

import pytest

#: The tests that start processes (their own redis-server, ``python -m bot``, MCP servers...): a folder, a module
#: (all its tests), or one test of a module (all its parameters).
PROCESS_TESTS = frozenset({
    "tests/shapes/",
    "tests/bot/serve/test_slackbot_mcp_servers.py",  # the tests' MCP server, under the web process
    "tests/bot/queue/test_approval_restarts.py",
    "tests/test_embedded_test_redis.py",
    "tests/test_lazy_imports.py",
    "tests/test_house.py::test_complexity_stays_at_most_ten",  # runs ruff
    "tests/tools/test_npm_offline.py",
    "tests/agent_core/test_budget_contention.py::test_a_call_billed_to_a_killed_worker_is_recorded_at_its_worst_case_within_one_lease_period",
    "tests/agent_core/test_budget_contention.py::test_a_call_billed_while_redis_was_down_is_recorded_once_redis_is_back",
    "tests/agent_core/test_budget_contention.py::test_a_call_whose_hold_cannot_be_renewed_is_abandoned_before_the_hold_lapses",
    "tests/agent_core/test_attachments.py",  # images are decoded in a reader process
    "tests/agent_core/test_cli.py",
    "tests/agent_core/test_file_kinds.py",  # images, PDFs and spreadsheets are read in a reader process
    "tests/bot/runs/test_cancel_watch.py::test_a_press_whose_message_was_lost_to_a_redis_restart_still_stops_the_run",
    "tests/bot/kernel/test_embedded_redis.py::test_single_machine_mode",
    "tests/bot/kernel/test_embedded_redis.py::test_the_embedded_redis_is_reached_through_its_unix_socket_or_its_port",
    "tests/bot/receive/test_events.py::test_healthz_is_503_when_redis_is_down",
    "tests/bot/runs/test_exfiltration_corpus.py",
    "tests/injection/",
    "tests/evals/test_golden_set.py",  # the service starts the canned MCP server and reads PDFs in a reader process
    "tests/bot/runs/test_files_in.py::test_a_mention_under_a_message_with_a_file_gets_that_file",  # a PDF is read
    "tests/bot/runs/test_files_in.py::test_a_mention_with_a_png_and_a_pdf_hands_both_to_the_run",
    "tests/bot/runs/test_files_in.py::test_a_mention_with_only_a_file_still_runs",  # an image: a reader process
    "tests/bot/runs/test_files_in.py::test_a_file_shared_in_a_reply_and_then_a_follow_up_refer_to_earlier_files",
    "tests/bot/runs/test_files_in.py::test_same_names_are_made_unique_and_a_malformed_files_list_is_refused",
    "tests/bot/workspace/test_grid.py::test_a_guest_of_one_workspace_gets_no_run_there_after_a_run_at_home_and_each_run_is_paid_by_its_own",
    "tests/bot/workspace/test_grid.py::test_an_admin_of_one_workspace_is_no_admin_of_its_sibling_before_or_after_acting_at_home",
    "tests/bot/queue/test_handover.py",
    "tests/bot/receive/test_listen_queue.py::test_the_listen_queue_holds_a_reconnect_wave",
    "tests/bot/kernel/test_log_lines.py",
    "tests/bot/runs/test_mcp_tools.py::test_a_servers_new_tool_reaches_the_catalog_and_the_next_run",
    "tests/bot/runs/test_mcp_tools.py::test_a_slack_run_calls_the_time_server_posts_its_result_and_stopping_leaves_no_child",
    "tests/bot/runs/test_mcp_tools.py::test_admins_turn_tools_off_and_on_audited_and_the_next_run_is_offered_only_what_is_on",
    "tests/bot/runs/test_mcp_tools.py::test_the_web_side_lists_the_catalog_workers_published_and_agent_tools_still_narrows",
    "tests/bot/kernel/test_metrics.py::test_values_of_several_processes_are_summed",
    "tests/bot/serve/test_metrics_exposure.py::test_a_second_command_on_the_same_metrics_port_stops_with_a_line_naming_it",
    "tests/bot/serve/test_metrics_exposure.py::test_a_supervised_worker_serves_one_metrics_listener_for_all_its_processes",
    "tests/bot/oauth/test_oauth_flood.py",
    "tests/bot/serve/test_processes.py",
    "tests/bot/queue/test_redis_outage.py",
    "tests/bot/queue/test_redis_pressure.py",
    "tests/bot/queue/test_resume.py",
    "tests/bot/runs/test_settle_outage.py",
    "tests/bot/runs/test_slow_start.py",
    "tests/bot/kernel/test_sentinel.py::test_a_failover_mid_run_ends_in_one_clear_reply_and_counts_no_call_twice",
    "tests/bot/kernel/test_sentinel.py::test_the_service_follows_the_master_through_a_failover",
    "tests/bot/serve/test_startup.py",
    "tests/bot/oauth/test_stored_tokens.py::test_an_install_no_key_reads_is_acknowledged_with_nothing_started_and_logged_once",
    "tests/bot/oauth/test_stored_tokens.py::test_rekey_re_encrypts_every_installation_with_the_newest_key_and_refuses_what_no_key_reads",
    "tests/bot/serve/test_supervisor.py",
    "tests/bot/serve/test_forked_children.py",
    "tests/bot/kernel/test_telemetry.py::test_python_m_bot_exports_each_process_s_spans_over_otlp_as_one_trace",
    "tests/bot/serve/test_metric_labels.py",
    "tests/bot/kernel/test_telemetry.py::test_without_capture_content_no_span_of_python_m_bot_quotes_a_call_s_arguments",
    "tests/test_deploy.py::test_the_health_check_passes_for_a_running_web_and_worker_and_fails_when_either_stops_serving",
    "tests/test_deploy.py::test_the_image_install_carries_every_file_of_the_packages",
    "tests/tools/test_file_readers.py",
    "tests/tools/test_files.py",
    "tests/tools/test_mcp_faults.py",
    "tests/tools/test_mcp_reference.py",
    "tests/tools/test_mcp_servers.py",
    "tests/tools/test_mcp_terminal.py",
})

_STARTS = {"subprocess.Popen", "os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.system", "os.exec"}
#: Processes the current test started (the audit hook appends, the autouse fixture reads and clears).
_started: list[str] = []
_own = False


def _audit(event: str, args: tuple[object, ...]) -> None:
    if event in _STARTS and not _own:
        _started.append(f"{event} {str(args[:2])[:160]}")


sys.addaudithook(_audit)
# The standard library runs `uname -p` once per process, on the first client that names the platform (the OpenAI
# and Slack clients' user agents): run it now, outside any test.
platform.processor()


@contextlib.contextmanager
def starting_own_process() -> Iterator[None]:
    """A process the test machinery starts for every test (the session's embedded Redis): not the test's own."""
    global _own
    _own = True
    try:
        yield
    finally:
        _own = False


def starts_processes(nodeid: str) -> bool:
    """Whether ``PROCESS_TESTS`` names the test, its module or a folder above it."""
    test = nodeid.split("[", 1)[0]
    module = test.split("::", 1)[0]
    folders = {str(parent) + "/" for parent in PurePosixPath(module).parents}
    return bool({test, module} & PROCESS_TESTS or folders & PROCESS_TESTS)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if starts_processes(item.nodeid):
            item.add_marker(pytest.mark.processes)
    # The long tests first: under xdist they start at once instead of trailing the run on one worker.
    items.sort(key=lambda item: item.get_closest_marker("processes") is None)


@pytest.fixture(autouse=True)
def processes_marked(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fails a test that started a process but is not marked ``processes``."""
    _started.clear()
    yield
    if _started and request.node.get_closest_marker("processes") is None:
        pytest.fail(f"started {len(_started)} process(es) without the `processes` marker, first {_started[0]}: "
                    "add the test to PROCESS_TESTS in tests/process_tests.py", pytrace=False)
