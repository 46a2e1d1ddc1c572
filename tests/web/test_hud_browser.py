"""The HUD in a real browser: Debian's chromium (Playwright, ``executable_path``) against a real
`relay up` (uvicorn over HTTP, Celery workers) holding the seeded history of ``hud_stack``.

What a maintainer relies on: every page loads with nothing broken and nothing fetched from
elsewhere; the grid cell of the failing job is red and opens its run; the run page shows the
funnel the API returns and the command that reproduces a failure; a test page shows its history;
filters and pages work; a running job's progress advances without a reload; the grid is usable
from the keyboard and every page is readable in a 360 px window; the downstreams page states
the CRCR verdicts the API computes.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

import pytest
from playwright.sync_api import expect

RED = "rgb(198, 40, 40)"  # --fail in hud.css
GREEN = "rgb(46, 125, 50)"  # --pass


def _pages(stack: Any) -> dict[str, str]:
    runs = stack.runs
    return {
        "overview": "/",
        "grid": "/grid",
        "run": f"/runs/{runs.failing_job}",
        "live run": f"/runs/{runs.live_job}",
        "test": f"/tests?id={quote(runs.flaky_test)}",
        "flaky": "/flaky?days=30",
        "downstreams": f"/downstreams?at={quote(stack.now.isoformat())}",
        "replays": "/replays",
        "replay": f"/replays/{stack.replay_job}",
        "specs": "/specs",
        "deliveries": "/deliveries",
    }


PAGES = [
    "overview",
    "grid",
    "run",
    "live run",
    "test",
    "flaky",
    "downstreams",
    "replays",
    "replay",
    "specs",
    "deliveries",
]


@pytest.mark.parametrize("name", PAGES)
def test_every_page_loads_whole_and_offline(tab: Any, hud_stack: Any, name: str) -> None:
    response = tab.goto(_pages(hud_stack)[name])
    assert response.status == 200, name
    assert response.headers["content-type"].startswith("text/html")
    expect(tab.page.locator("main h1")).to_be_visible()
    # the stylesheet applied (the header is dark) and our script ran (no console error)
    header = tab.page.locator("header.top")
    assert header.evaluate("e => getComputedStyle(e).backgroundColor") == "rgb(13, 27, 42)"
    tab.page.wait_for_load_state("networkidle")
    tab.clean()


def test_grid_cell_of_the_failing_job_is_red_and_opens_its_run(tab: Any, hud_stack: Any) -> None:
    runs = hud_stack.runs
    tab.goto("/grid")
    cell = tab.page.locator(f'td.cell[data-job="{runs.failing_job}"]')
    expect(cell).to_be_visible()
    assert cell.evaluate("e => getComputedStyle(e).backgroundColor") == RED
    assert cell.locator("xpath=..").get_attribute("data-sha") == runs.failing_sha
    green = tab.page.locator(f'td.cell[data-job="{runs.passing_job}"]')
    assert green.evaluate("e => getComputedStyle(e).backgroundColor") == GREEN
    expect(cell.locator("a")).to_have_text(re.compile(r"failure · 2"))
    cell.locator("a").click()
    expect(tab.page).to_have_url(f"{hud_stack.url}/runs/{runs.failing_job}")
    expect(tab.page.locator("h1")).to_contain_text(f"Run {runs.failing_job}")
    expect(tab.page.locator("#run-status")).to_have_text("failure")
    tab.clean()


def test_run_page_shows_the_funnel_the_api_returns(tab: Any, hud_stack: Any) -> None:
    job = hud_stack.runs.failing_job
    api = hud_stack.api(f"/api/v1/hud/runs/{job}")
    tab.goto(f"/runs/{job}")
    rows = tab.page.locator("#funnel tbody tr")
    expect(rows).to_have_count(len(api["funnel"]))
    shown = [
        (
            r.get_attribute("data-stage"),
            r.locator("td.in").inner_text(),
            r.locator("td.out").inner_text(),
        )
        for r in rows.all()
    ]
    assert shown == [(s["stage"], str(s["count_in"]), str(s["count_out"])) for s in api["funnel"]]
    # the chart draws the same numbers
    chart = tab.page.locator("#h-funnel ~ svg.chart").first
    for s in api["funnel"]:
        expect(chart).to_contain_text(str(s["count_out"]))
    counts = api["test_results"]
    expect(tab.page.locator("#run-counts")).to_have_text(
        f"{counts['passed']} passed · {counts['failed']} failed · {counts['skipped']} skipped"
        f" · {counts['total']} total"
    )
    expect(tab.page.locator("#h-funnel ~ p").first).to_contain_text(
        f"Selected {api['selected']}, cut {api['cut']}"
    )
    tab.clean()


def test_run_page_gives_the_command_that_reproduces_a_failure(tab: Any, hud_stack: Any) -> None:
    runs = hud_stack.runs
    failing = hud_stack.api(f"/api/v1/hud/runs/{runs.failing_job}/results", failing="true")
    tab.goto(f"/runs/{runs.failing_job}")
    items = tab.page.locator("#failures > li")
    expect(items).to_have_count(len(runs.failing_tests))
    for api_item, li in zip(failing["items"], items.all(), strict=True):
        assert li.get_attribute("data-test") == api_item["test_id"]
        expect(li.locator("pre.cmd")).to_have_text(api_item["reproduce"])
        expect(li.locator("pre.msg")).to_contain_text("Tensor-likes are not close")
        assert li.locator("button.copy").get_attribute("data-copy") == api_item["reproduce"]
    # the full failure text is one click away
    with tab.page.expect_navigation():
        items.first.get_by_role("link", name="full failure text").click()
    assert tab.page.locator("body").inner_text().startswith(runs.failing_tests[0])
    tab.clean()


def test_test_page_shows_its_history(tab: Any, hud_stack: Any) -> None:
    test_id = hud_stack.runs.history_test
    api = hud_stack.api("/api/v1/hud/tests/history", test_id=test_id, limit=50)
    tab.goto(f"/tests?id={quote(test_id)}")
    expect(tab.page.locator("#test-id")).to_have_text(test_id)
    expect(tab.page.locator("#h-hist")).to_have_text(f"History ({api['total']} runs)")
    rows = tab.page.locator("#history tbody tr:not(.msgrow)")
    expect(rows).to_have_count(len(api["items"]))
    assert [r.locator("td").first.inner_text() for r in rows.all()] == [
        str(h["job_id"]) for h in api["items"]
    ]
    # the outcome strip has one mark per run, the sparkline one point per run
    expect(tab.page.locator(".strip svg rect")).to_have_count(len(api["items"]))
    expect(tab.page.locator("#spec")).to_contain_text("decision")
    rows.first.locator("a").click()
    expect(tab.page).to_have_url(re.compile(rf"/runs/{api['items'][0]['job_id']}$"))
    tab.clean()


def test_grid_filters_and_pages(tab: Any, hud_stack: Any) -> None:
    page = tab.page
    tab.goto("/grid")
    page.get_by_label("event").select_option("pull_request")
    with page.expect_navigation():
        page.get_by_role("button", name="Filter").click()
    expect(page).to_have_url(re.compile(r"event=pull_request"))
    prs = hud_stack.api("/api/v1/hud/grid", event="pull_request")
    rows = page.locator("#grid tbody tr")
    expect(rows).to_have_count(prs["total"])
    assert [r.get_attribute("data-sha") for r in rows.all()] == [
        r["head_sha"] for r in prs["items"]
    ]
    # a PR link narrows to that PR
    with page.expect_navigation():
        page.locator("#grid tbody tr").first.get_by_role("link", name=re.compile(r"^#\d+$")).click()
    expect(page).to_have_url(re.compile(r"pr=\d+"))
    expect(rows).to_have_count(1)
    # pages of 5: the second page is the API's second page, and back again
    everything = hud_stack.api("/api/v1/hud/grid", limit=500)
    tab.goto("/grid?limit=5")
    expect(page.locator(".pager")).to_contain_text(f"1-5 of {everything['total']}")
    with page.expect_navigation():
        page.get_by_role("link", name=re.compile("next")).first.click()
    expect(page).to_have_url(re.compile(r"offset=5"))
    assert [r.get_attribute("data-sha") for r in rows.all()] == [
        r["head_sha"] for r in everything["items"][5:10]
    ]
    with page.expect_navigation():
        page.get_by_role("link", name=re.compile("previous")).first.click()
    assert [r.get_attribute("data-sha") for r in rows.all()] == [
        r["head_sha"] for r in everything["items"][:5]
    ]
    # a bad filter is one line, and the page still works
    response = tab.goto("/grid?event=bogus")
    assert response.status == 422
    expect(page.locator("div.error")).to_have_text("unknown event type 'bogus'")
    tab.clean()


def test_run_results_filters_and_pages(tab: Any, hud_stack: Any) -> None:
    page = tab.page
    job = hud_stack.runs.failing_job
    tab.goto(f"/runs/{job}")
    results = page.locator("#results-table tbody tr")
    form = page.locator("#results form")
    form.get_by_label("outcome").select_option("failed")
    with page.expect_navigation():
        form.get_by_role("button", name="Filter").click()
    expect(page).to_have_url(re.compile(r"outcome=failed"))
    expect(results).to_have_count(len(hud_stack.runs.failing_tests))
    form.get_by_label("outcome").select_option("")
    form.get_by_label("suite").select_option("common")
    form.get_by_label("tag").select_option("slow")
    with page.expect_navigation():
        form.get_by_role("button", name="Filter").click()
    api = hud_stack.api(f"/api/v1/hud/runs/{job}/results", suite="common", tag="slow")
    expect(results).to_have_count(api["total"])
    tab.goto(f"/runs/{job}?limit=25")
    expect(results).to_have_count(25)
    with page.expect_navigation():
        page.locator("#results").get_by_role("link", name=re.compile("next")).click()
    expect(page).to_have_url(re.compile(r"offset=25"))
    second = hud_stack.api(f"/api/v1/hud/runs/{job}/results", limit=25, offset=25)
    assert [r.locator("code").inner_text() for r in results.all()] == [
        r["test_id"] for r in second["items"]
    ]
    tab.clean()


def test_a_running_job_advances_without_a_reload(tab: Any, live_run: Any) -> None:
    page = tab.page
    tab.goto(f"/runs/{live_run.job_id}")
    expect(page.locator("#run-status")).to_have_text("in_progress")
    expect(page.locator("#run-done")).to_have_text("0")
    page.evaluate("window.__sameDocument = true")  # gone if the page reloads
    live_run.advance(0, 4)
    expect(page.locator("#run-done")).to_have_text("4")
    expect(page.locator('#shards tr[data-shard="0"] .shard-done')).to_have_text("4")
    expect(page.locator('#shards tr[data-shard="1"] .shard-done')).to_have_text("0")
    expect(page.locator("#new-failures")).to_be_hidden()
    live_run.advance(1, 10, outcome="failed")
    expect(page.locator("#run-done")).to_have_text("14")
    # failures are listed on the next load; the page says how many arrived since
    expect(page.locator("#new-failures")).to_have_text(
        "10 more failed since this page loaded: reload to see them"
    )
    expect(page.locator('#shards tr[data-shard="1"] .shard-state')).to_have_text("done")
    expect(page.locator("#run-counts")).to_have_text("4 passed · 10 failed · 0 skipped · 14 total")
    assert page.locator("#run-progress").evaluate("e => e.value") == 14
    live_run.finish("failure")
    expect(page.locator("#run-status")).to_have_text("failure")
    assert page.evaluate("window.__sameDocument") is True
    # once completed it stops asking
    polls = page.locator("#live").get_attribute("data-polls")
    assert polls is not None and int(polls) >= 3
    page.wait_for_timeout(3000)
    assert page.locator("#live").get_attribute("data-polls") == polls
    with page.expect_navigation():
        page.locator("#new-failures a").click()
    expect(page.locator("#failures > li")).to_have_count(10)
    expect(page.locator("#results-table tbody tr")).to_have_count(10)
    expect(page.locator("#new-failures")).to_be_hidden()
    tab.clean()


def test_the_grid_is_usable_from_the_keyboard(tab: Any, hud_stack: Any) -> None:
    page = tab.page
    tab.goto("/grid")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.className") == "skip"
    expect(page.locator("a.skip")).to_be_in_viewport()
    page.keyboard.press("Enter")
    expect(page).to_have_url(re.compile(r"#main$"))
    where = (
        "() => { const td = document.activeElement.closest('td');"
        " return [td.parentElement.sectionRowIndex, td.cellIndex, td.dataset.job]; }"
    )
    # the runner's column: every commit has a run in it
    column = page.locator("#grid thead th").all_inner_texts().index("local/spyre\nspyre")
    rows = page.locator("#grid tbody tr")
    rows.nth(0).locator("td").nth(column - 1).locator("a").focus()
    assert page.evaluate(where)[:2] == [0, column]
    page.keyboard.press("ArrowDown")
    row, col, job = page.evaluate(where)
    assert (row, col) == (1, column)
    assert job == rows.nth(1).locator("td").nth(column - 1).get_attribute("data-job")
    page.keyboard.press("ArrowUp")
    assert page.evaluate(where)[:2] == [0, column]
    # the focused cell is visibly outlined, and Enter opens its run
    assert page.evaluate("getComputedStyle(document.activeElement).outlineStyle") == "solid"
    page.keyboard.press("ArrowDown")
    with page.expect_navigation():
        page.keyboard.press("Enter")
    expect(page).to_have_url(re.compile(rf"/runs/{job}$"))
    tab.clean()


def test_arrow_keys_skip_the_commits_a_column_did_not_run(tab: Any, hud_stack: Any) -> None:
    """The health downstreams' commits sit between the runner's: moving down the runner's
    column jumps over the rows it has no run in."""
    page = tab.page
    tab.goto("/grid?limit=200")
    column = page.locator("#grid thead th").all_inner_texts().index("local/spyre\nspyre")
    has_run = page.locator("#grid tbody tr").evaluate_all(
        f"rows => rows.map(r => !!r.cells[{column}].querySelector('a'))"
    )
    gap = next(i for i in range(1, len(has_run) - 1) if has_run[i - 1] and not has_run[i])
    below = next(i for i in range(gap, len(has_run)) if has_run[i])
    page.locator("#grid tbody tr").nth(gap - 1).locator("td").nth(column - 1).locator("a").focus()
    page.keyboard.press("ArrowDown")
    assert page.evaluate(
        "[document.activeElement.closest('tr').sectionRowIndex,"
        " document.activeElement.closest('td').cellIndex]"
    ) == [below, column]
    page.keyboard.press("ArrowUp")
    assert page.evaluate("document.activeElement.closest('tr').sectionRowIndex") == gap - 1
    tab.clean()


@pytest.mark.parametrize("name", PAGES)
def test_every_page_is_readable_in_a_narrow_window(
    narrow_tab: Any, hud_stack: Any, name: str
) -> None:
    page = narrow_tab.page
    narrow_tab.goto(_pages(hud_stack)[name])
    width = page.evaluate("window.innerWidth")
    # nothing pushes the page sideways (wide tables scroll inside their own box)
    assert page.evaluate("document.documentElement.scrollWidth") <= width, name
    font = page.evaluate("parseFloat(getComputedStyle(document.body).fontSize)")
    assert font >= 14
    # every navigation link is on screen
    for link in page.locator("header.top nav a").all():
        box = link.bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= width, name
    narrow_tab.clean()


def test_downstream_verdicts_in_the_page_are_the_apis(tab: Any, hud_stack: Any) -> None:
    at = hud_stack.now.isoformat()
    api = {h["repo"]: h for h in hud_stack.api("/api/v1/hud/health", at=at)}
    tab.goto(f"/downstreams?at={quote(at)}")
    for repo, (verdict, failing) in hud_stack.health.items():
        assert api[repo]["verdict"] == verdict, repo
        section = tab.page.locator(f'section.downstream[data-repo="{repo}"]')
        expect(section.locator(".verdict")).to_have_text(verdict)
        expect(section.locator(".summary")).to_have_text(api[repo]["summary"])
        if api[repo]["level"] == "L2":
            unmet = {
                r.get_attribute("data-criterion")
                for r in section.locator("tr[data-criterion].unmet").all()
            }
            assert unmet == failing, repo
    # each rule with the value that decides it, its limit and whether it is met
    ready = tab.page.locator('section.downstream[data-repo="acme/npu-ready"]')
    expect(ready.locator('tr[data-criterion="pass_rate"] td')).to_have_text(
        ["job pass rate", "100.0 %", ">= 90 %", "yes"]
    )
    red = tab.page.locator('section.downstream[data-repo="acme/npu-red"]')
    expect(red.locator('tr[data-criterion="pass_rate"] td')).to_have_text(
        ["job pass rate", "80.0 %", ">= 90 %", "no"]
    )
    queue = tab.page.locator('section.downstream[data-repo="acme/npu-queue"]')
    expect(queue.locator('tr[data-criterion="avg_queue"] td')).to_have_text(
        ["average queue", "40.0 min", "< 30 min", "no"]
    )
    demoted = tab.page.locator('section.downstream[data-repo="acme/npu-l3"]')
    expect(demoted.locator('tr[data-trigger="pass_rate"] td')).to_have_text(
        ["job pass rate", "80.0 %", "<= 90 %", "yes"]
    )
    tab.clean()


def test_the_overview_follows_running_jobs_without_a_reload(tab: Any, live_run: Any) -> None:
    page = tab.page
    tab.goto("/")
    job = page.locator(f'li.live-job[data-job="{live_run.job_id}"]')
    expect(job.locator(".live-done")).to_have_text("0")
    page.evaluate("window.__sameDocument = true")
    live_run.advance(0, 3)
    live_run.advance(1, 2, outcome="failed")
    expect(job.locator(".live-done")).to_have_text("5")
    expect(job.locator(".live-failed")).to_have_text("2 failed")
    live_run.finish("failure")
    expect(job.locator(".live-status")).to_have_text("failure")
    assert job.locator(".live-status").evaluate("e => getComputedStyle(e).backgroundColor") == RED
    assert page.evaluate("window.__sameDocument") is True
    tab.clean()
