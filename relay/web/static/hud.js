// crcr-relay HUD: progressive enhancement only (every page works without it).
// - the run page polls /api/v1/hud/runs/{id}/progress while the job runs and updates counts and shards,
//   the overview does the same for each job under "Running now";
// - arrow keys move between grid cells; "copy" buttons copy reproduction commands.
(function () {
  "use strict";

  function liveRun() {
    var live = document.getElementById("live");
    if (!live) return;
    var job = live.getAttribute("data-job");
    var status = live.getAttribute("data-status");
    if (status === "completed") return;
    var url = "/api/v1/hud/runs/" + job + "/progress";
    function text(id, value) { var el = document.getElementById(id); if (el) el.textContent = value; }
    function tick() {
      fetch(url, { headers: { "Accept": "application/json" } })
        .then(function (r) { return r.ok ? r.json() : null; })
        .then(function (p) {
          if (!p) return;
          var c = p.test_results;
          text("run-status", p.conclusion || p.status);
          text("run-done", String(c.total));
          var counts = document.getElementById("run-counts");
          if (counts) counts.textContent = c.passed + " passed · " + c.failed + " failed · " + c.skipped + " skipped · " + c.total + " total";
          var fresh = document.getElementById("new-failures");
          if (fresh) {
            var more = c.failed - Number(fresh.getAttribute("data-shown"));
            if (more > 0) {
              fresh.hidden = false;
              fresh.innerHTML = "";
              var a = document.createElement("a");
              a.href = window.location.pathname + "?outcome=failed#results";
              a.textContent = "reload to see them";
              fresh.appendChild(document.createTextNode(more + " more failed since this page loaded: "));
              fresh.appendChild(a);
            }
          }
          var bar = document.getElementById("run-progress");
          if (bar) bar.value = c.total;
          p.shards.forEach(function (s) {
            var row = document.querySelector('#shards tr[data-shard="' + s.index + '"]');
            if (!row) return;
            row.querySelector(".shard-state").textContent = s.state;
            row.querySelector(".shard-done").textContent = String(s.done);
            var pb = row.querySelector("progress"); if (pb) pb.value = s.done;
          });
          live.setAttribute("data-status", p.status);
          live.setAttribute("data-polls", String(Number(live.getAttribute("data-polls") || 0) + 1));
          if (p.status !== "completed") window.setTimeout(tick, 2000);
        })
        .catch(function () { window.setTimeout(tick, 5000); });
    }
    window.setTimeout(tick, 1000);
  }

  // the overview's "Running now": each running job's count, failures and status, until it ends
  function liveOverview() {
    document.querySelectorAll("li.live-job").forEach(function (li) {
      var url = "/api/v1/hud/runs/" + li.getAttribute("data-job") + "/progress";
      function tick() {
        fetch(url, { headers: { "Accept": "application/json" } })
          .then(function (r) { return r.ok ? r.json() : null; })
          .then(function (p) {
            if (!p) return;
            var c = p.test_results;
            li.querySelector(".live-done").textContent = String(c.total);
            li.querySelector(".live-failed").textContent = c.failed ? c.failed + " failed" : "";
            var pb = li.querySelector("progress"); if (pb) pb.value = c.total;
            var badge = li.querySelector(".live-status");
            badge.textContent = p.conclusion || p.status;
            badge.className = "badge live-status " + (p.conclusion ? "c-" + p.conclusion : "s-" + p.status);
            li.setAttribute("data-status", p.status);
            li.setAttribute("data-polls", String(Number(li.getAttribute("data-polls") || 0) + 1));
            if (p.status !== "completed") window.setTimeout(tick, 2000);
          })
          .catch(function () { window.setTimeout(tick, 5000); });
      }
      window.setTimeout(tick, 1000);
    });
  }

  function gridKeys() {
    var grid = document.getElementById("grid");
    if (!grid) return;
    grid.addEventListener("keydown", function (e) {
      var moves = { ArrowLeft: [0, -1], ArrowRight: [0, 1], ArrowUp: [-1, 0], ArrowDown: [1, 0] };
      var m = moves[e.key];
      var td = e.target.closest("td.cell");
      if (!m || !td) return;
      var tr = td.parentElement;
      var rows = Array.prototype.slice.call(grid.tBodies[0].rows);
      var r = rows.indexOf(tr), c = td.cellIndex;
      // skip the empty cells (a commit a column did not run) to the next run in that direction
      for (;;) {
        r += m[0]; c += m[1];
        if (r < 0 || r >= rows.length) return;
        var target = rows[r].cells[c];
        if (!target || !target.classList.contains("cell")) return;
        var link = target.querySelector("a");
        if (link) { link.focus(); e.preventDefault(); return; }
      }
    });
  }

  function copyButtons() {
    document.querySelectorAll("button.copy").forEach(function (b) {
      b.addEventListener("click", function () {
        var text = b.getAttribute("data-copy");
        if (navigator.clipboard) navigator.clipboard.writeText(text).then(function () { b.textContent = "copied"; });
      });
    });
  }

  document.addEventListener("DOMContentLoaded", function () { liveRun(); liveOverview(); gridKeys(); copyButtons(); });
})();
