"""The HUD's status API (``/api/v1/hud``) on a seeded history with known answers, in process,
on SQLite and on PostgreSQL: the grid and its filters and pages, a run's funnel and failures
with their reproduction commands, results under every filter, a test's history, flaky tests,
and each downstream's CRCR verdict."""

from __future__ import annotations

from typing import Any

import pytest

# ----------------------------------------------------------------------------- health


def test_health_verdicts_have_the_known_answers(hud: Any) -> None:
    response = hud.client.get("/api/v1/hud/health", params={"at": hud.now.isoformat()})
    assert response.status_code == 200, response.text
    by_repo = {h["repo"]: h for h in response.json()}
    for repo, (verdict, failing) in hud.health.items():
        h = by_repo[repo]
        assert h["verdict"] == verdict, (repo, h["summary"])
        if h["level"] == "L2":
            unmet = {c["name"] for c in h["l3_criteria"] if not c["met"]}
            assert unmet == failing, (repo, h["summary"])
            assert h["l3_ready"] is (not failing)
    ready = by_repo["acme/npu-ready"]
    w = ready["window_14d"]
    # 20 jobs + the failed first attempt of one of them, every latest attempt green
    assert (w["jobs"], w["graded"], w["passed"], w["pass_rate"]) == (21, 20, 20, 1.0)
    assert w["avg_queue_s"] == pytest.approx(300.0)
    assert w["p50_e2e_s"] == pytest.approx(3600.0)
    assert ready["summary"].startswith("ready for L3 (14 days): ")
    assert "job pass rate 100.0 % (needs >= 90 %)" in ready["summary"]
    red = by_repo["acme/npu-red"]
    assert red["window_14d"]["pass_rate"] == pytest.approx(16 / 20)
    assert "job pass rate 80.0 % (needs >= 90 %)" in red["summary"]
    tail = by_repo["acme/npu-long-tail"]["window_14d"]
    assert (tail["over_3h"], tail["over_3h_share"]) == (1, pytest.approx(1 / 20))
    assert by_repo["acme/npu-timeouts"]["window_14d"]["timeout_rate"] == pytest.approx(1 / 20)
    assert by_repo["acme/npu-queue"]["window_14d"]["avg_queue_s"] == pytest.approx(2400.0)
    assert by_repo["acme/npu-new"]["l3_criteria"][0]["value"] == pytest.approx(10.0)
    demoted = by_repo["acme/npu-l3"]
    assert demoted["demote"] is True
    assert {c["name"] for c in demoted["demotion_triggers"] if c["met"]} == {"pass_rate"}
    assert (demoted["window_7d"]["jobs"], demoted["window_7d"]["pass_rate"]) == (10, 0.8)


def test_health_page_states_each_verdict_with_its_numbers(hud: Any) -> None:
    page = hud.client.get("/downstreams", params={"at": hud.now.isoformat()})
    assert page.status_code == 200
    for repo, (verdict, _) in hud.health.items():
        section = page.text.split(f'data-repo="{repo}"', 1)[1].split("</section>", 1)[0]
        assert f">{verdict}</span>" in section, repo
    assert "job pass rate 80.0 % (needs &gt;= 90 %)" in page.text


# ----------------------------------------------------------------------------- grid


def test_grid_cell_of_the_failing_job_is_a_failure_linking_to_its_run(hud: Any) -> None:
    body = hud.client.get("/api/v1/hud/grid", params={"repo": "local/spyre"}).json()
    runs = hud.runs
    # pushes, pull requests and the running commit: one row per commit
    assert body["total"] == len(runs.commits) + 3 + 1
    assert body["columns"] == [{"repo": "local/spyre", "job_name": "spyre"}]
    row = next(r for r in body["items"] if r["head_sha"] == runs.failing_sha)
    cell = row["cells"][0]
    assert (cell["job_id"], cell["conclusion"], cell["page"]) == (
        runs.failing_job,
        "failure",
        f"/runs/{runs.failing_job}",
    )
    assert cell["test_results"]["failed"] == len(runs.failing_tests)
    assert row["branch"] == "main" and row["event_type"] == "push"
    # the commit with a re-run shows its latest job and counts both
    rerun = next(r for r in body["items"] if r["head_sha"] == runs.commits[2])
    assert rerun["cells"][0]["runs"] == 2
    live = body["items"][0]
    assert live["cells"][0]["job_id"] == runs.live_job
    assert live["cells"][0]["status"] == "in_progress"


def test_grid_filters(hud: Any) -> None:
    get = hud.client.get
    prs = get("/api/v1/hud/grid", params={"event": "pull_request"}).json()
    assert prs["total"] == 3 and {r["event_type"] for r in prs["items"]} == {"pull_request"}
    one = get("/api/v1/hud/grid", params={"pr": hud.runs.pr_number}).json()
    assert [r["pr_number"] for r in one["items"]] == [hud.runs.pr_number]
    main = get("/api/v1/hud/grid", params={"branch": "main", "event": "push"}).json()
    assert main["total"] == len(hud.runs.commits) + 1
    assert get("/api/v1/hud/grid", params={"branch": "release/2.14"}).json()["total"] == 0
    bad = get("/api/v1/hud/grid", params={"event": "bogus"})
    assert bad.status_code == 422 and "event" in bad.json()["detail"]
    assert get("/api/v1/hud/grid", params={"evnt": "push"}).status_code == 422


def test_grid_pages_by_offset_and_by_cursor(hud: Any) -> None:
    get = hud.client.get
    everything = [r["head_sha"] for r in get("/api/v1/hud/grid").json()["items"]]
    first = get("/api/v1/hud/grid", params={"limit": 5}).json()
    assert [r["head_sha"] for r in first["items"]] == everything[:5]
    assert first["total"] == len(everything) and first["next_cursor"]
    by_cursor = get("/api/v1/hud/grid", params={"limit": 5, "cursor": first["next_cursor"]})
    assert [r["head_sha"] for r in by_cursor.json()["items"]] == everything[5:10]
    by_offset = get("/api/v1/hud/grid", params={"limit": 5, "offset": 5}).json()
    assert [r["head_sha"] for r in by_offset["items"]] == everything[5:10]
    last = get("/api/v1/hud/grid", params={"limit": 5, "offset": len(everything) - 2}).json()
    assert len(last["items"]) == 2 and last["next_cursor"] is None


# ----------------------------------------------------------------------------- run


def test_run_shows_the_funnel_timings_and_shards(hud: Any) -> None:
    run = hud.client.get(f"/api/v1/hud/runs/{hud.runs.failing_job}").json()
    assert [(s["stage"], s["count_in"]) for s in run["funnel"]] == [
        (stage, count_in) for stage, count_in, _ in hud.runs.funnel
    ]
    assert run["funnel"][-1]["count_out"] == hud.runs.results_per_job
    assert (run["conclusion"], run["queue_s"], run["execution_s"]) == ("failure", 30.0, 570.0)
    assert run["test_results"]["failed"] == 2 and run["universe_variants"] == 31232
    assert run["cut"] == 5 and run["selected"] == 60
    assert run["device_time_s"] == pytest.approx(
        sum(20.0 + i % 5 for i in range(hud.runs.results_per_job)) / 1e6
    )
    assert [s["done"] for s in run["shards"]] == [hud.runs.results_per_job]
    assert hud.client.get("/api/v1/hud/runs/999999").status_code == 404


def test_failures_carry_the_command_that_reproduces_them(hud: Any) -> None:
    job = hud.runs.failing_job
    page = hud.client.get(f"/api/v1/hud/runs/{job}/results", params={"failing": "true"}).json()
    assert [r["test_id"] for r in page["items"]] == hud.runs.failing_tests
    first = page["items"][0]
    assert first["message"].startswith("AssertionError: Tensor-likes are not close!")
    assert first["reproduce"] == (
        "cd /srv/crcr-relay && SPYRE_DEVICE_COUNT=2 python -P -m pytest -p "
        "spyre_stack.testing.pytest_plugin -p testspecs.pytest_plugin --spec backends/spyre/specs "
        f"{first['test_id']}"
    )
    artifact = hud.client.get(first["artifact"])
    assert artifact.status_code == 200 and artifact.text.startswith(first["test_id"])
    passing = hud.client.get(f"/api/v1/hud/runs/{job}/results", params={"outcome": "passed"})
    assert all(r["reproduce"] is None for r in passing.json()["items"])


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"outcome": "failed"}, 2),
        ({"suite": "common"}, 10),  # every 6th of 60
        ({"op": "softmax"}, 8),  # every 8th of 60 (i % 8 == 2)
        ({"tag": "slow"}, 10),
        ({"mode": "xfail"}, 6),
        ({"suite": "common", "tag": "slow"}, 10),
        ({"suite": "out", "tag": "slow"}, 0),
    ],
)
def test_results_filters(hud: Any, params: dict[str, str], expected: int) -> None:
    page = hud.client.get(f"/api/v1/hud/runs/{hud.runs.failing_job}/results", params=params)
    assert page.status_code == 200, page.text
    assert page.json()["total"] == expected


def test_results_refuse_unknown_filter_values_and_page(hud: Any) -> None:
    url = f"/api/v1/hud/runs/{hud.runs.failing_job}/results"
    assert hud.client.get(url, params={"outcome": "bogus"}).status_code == 422
    assert hud.client.get(url, params={"mode": "maybe"}).status_code == 422
    first = hud.client.get(url, params={"limit": 25}).json()
    second = hud.client.get(url, params={"limit": 25, "cursor": first["next_cursor"]}).json()
    ids = [r["id"] for r in first["items"] + second["items"]]
    assert len(ids) == len(set(ids)) == 50 and ids == sorted(ids)


# ----------------------------------------------------------------------------- tests


def test_history_of_one_test_across_commits(hud: Any) -> None:
    test_id = hud.runs.history_test
    page = hud.client.get("/api/v1/hud/tests/history", params={"test_id": test_id}).json()
    # every push job (12, plus the re-run) and every PR job ran it
    assert page["total"] == len(hud.runs.commits) + 1 + 3
    shas = [h["head_sha"] for h in page["items"]]
    assert hud.runs.commits[0] in shas and hud.runs.failing_sha in shas
    assert {h["outcome"] for h in page["items"]} == {"passed"}
    assert all(h["duration_s"] and h["device_time_us"] for h in page["items"])
    ids = [h["job_id"] for h in page["items"]]
    assert ids == sorted(ids, reverse=True)  # newest first
    none = hud.client.get("/api/v1/hud/tests/history", params={"test_id": "no::such"}).json()
    assert none["total"] == 0


def test_flaky_tests_passed_and_failed_on_one_commit(hud: Any) -> None:
    page = hud.client.get("/api/v1/hud/flaky", params={"days": 30}).json()
    assert [f["test_id"] for f in page["items"]] == [hud.runs.flaky_test]
    flaky = page["items"][0]
    assert (flaky["commits"], flaky["passed"], flaky["failed"]) == (1, 1, 1)
    assert flaky["last_sha"] == hud.runs.commits[2]
    # the failing job's tests failed once on their commit and never passed there: not flaky
    assert hud.runs.failing_tests[0] not in {f["test_id"] for f in page["items"]}


# ----------------------------------------------------------------------------- pages


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "/grid",
        "/grid?event=push&branch=main",
        "/downstreams",
        "/flaky",
        "/replays",
        "/specs",
        "/deliveries",
        "/deliveries?state=processed",
    ],
)
def test_every_page_renders(hud: Any, path: str) -> None:
    response = hud.client.get(path)
    assert response.status_code == 200, response.text[-2000:]
    assert response.headers["content-type"].startswith("text/html")
    assert "<main" in response.text


def test_run_and_test_pages_render(hud: Any) -> None:
    run = hud.client.get(f"/runs/{hud.runs.failing_job}")
    assert run.status_code == 200
    for test_id in hud.runs.failing_tests:
        assert test_id in run.text
    assert "python -P -m pytest" in run.text
    assert "operators: add changed" in run.text  # why a test was chosen
    assert "over the budget of 60 device-seconds" in run.text  # what was cut and why
    test = hud.client.get("/tests", params={"id": hud.runs.flaky_test})
    assert test.status_code == 200 and 'id="flaky"' in test.text and "Flaky:" in test.text
    assert hud.client.get("/runs/999999").status_code == 404
    assert hud.client.get("/grid", params={"event": "bogus"}).status_code == 422


def test_facets_count_a_run_by_outcome_suite_op_tag_and_mode(hud: Any) -> None:
    """The run page's filter menus and the replay page's per-suite and per-op tables."""
    page = hud.client.get(f"/replays/{hud.runs.failing_job}")
    assert page.status_code == 200
    per_suite = page.text.split('id="per-suite"', 1)[1].split("</table>", 1)[0]
    # 60 results, 6 suites in turn; the two failures are tests 3 (gradients) and 11 (errors)
    for suite, expected in [
        ("common", "passed 10"),
        ("gradients", "failed 1, passed 9"),
        ("modules", "passed 10"),
        ("errors", "failed 1, passed 9"),
    ]:
        row = per_suite.split(f">{suite}</a>", 1)[1].split("</tr>", 1)[0]
        assert f"<td>10</td><td>{expected}</td>" in row, (suite, row)
    per_op = page.text.split('id="per-op"', 1)[1].split("</table>", 1)[0]
    # 60 results, 8 ops in turn: softmax is i % 8 == 2, matmul i % 8 == 3 (tests 3 and 11)
    assert ">softmax</a></td><td>8</td><td>passed 8</td>" in per_op
    assert ">matmul</a></td><td>8</td><td>failed 2, passed 6</td>" in per_op
    run = hud.client.get(f"/runs/{hud.runs.failing_job}")
    menu = run.text.split('name="tag"', 1)[1].split("</select>", 1)[0]
    assert ">slow</option>" in menu


@pytest.mark.parametrize("path", ["/", "/grid"])
def test_an_empty_hud_says_what_to_do_first(empty_hud: Any, path: str) -> None:
    page = empty_hud.get(path)
    assert page.status_code == 200
    empty = page.text.split('id="empty-state"', 1)[1].split("</section>", 1)[0]
    assert "<code>relay submit --" in empty


def test_an_empty_hud_answers_every_page_and_endpoint(empty_hud: Any) -> None:
    for path in [
        "/downstreams",
        "/flaky",
        "/replays",
        "/deliveries",
        "/api/v1/hud/grid",
        "/api/v1/hud/flaky",
        "/api/v1/hud/health",
    ]:
        assert empty_hud.get(path).status_code == 200, path
    assert "No downstream is listed" in empty_hud.get("/downstreams").text
    assert "No release replay yet" in empty_hud.get("/replays").text
    assert empty_hud.get("/api/v1/hud/grid").json()["total"] == 0


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (None, "-"),
        (0.0, "0.0 ms"),
        (2.1e-5, "21.0 µs"),
        (0.26, "260.0 ms"),
        (4.5, "4.50 s"),
        (570.0, "9.5 min"),
        (3 * 3600.0, "3.00 h"),
    ],
)
def test_durations_read_in_their_unit(seconds: float | None, shown: str) -> None:
    from relay.web.render import duration

    assert duration(seconds) == shown
