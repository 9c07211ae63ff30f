// jobledger dashboard: the only script. It keeps the live parts of a page fresh and lets a
// checkbox select every dead letter. Pages work without it.
(function () {
  "use strict";

  // Elements with data-refresh="SECONDS" are replaced by the same element of a fresh copy of the
  // page every SECONDS, while the tab is visible. Forms are never inside them, so nothing an
  // operator types is lost.
  function refresher(el) {
    var seconds = parseFloat(el.getAttribute("data-refresh"));
    if (!(seconds > 0)) return;
    var id = el.id;
    var busy = false;
    setInterval(function () {
      if (busy || document.hidden) return;
      busy = true;
      fetch(window.location.href, { credentials: "same-origin", headers: { "Accept": "text/html" } })
        .then(function (response) {
          if (response.redirected || !response.ok) return null;
          return response.text();
        })
        .then(function (html) {
          if (!html) return;
          var fresh = new DOMParser().parseFromString(html, "text/html").getElementById(id);
          var current = document.getElementById(id);
          if (fresh && current) {
            current.replaceWith(document.importNode(fresh, true));
            document.body.setAttribute("data-refreshed", String(Date.now()));
          }
        })
        .catch(function () {})
        .then(function () { busy = false; });
    }, seconds * 1000);
  }

  function selectAll(box) {
    box.addEventListener("change", function () {
      var form = box.closest("form");
      form.querySelectorAll('input[type="checkbox"][name="id"]').forEach(function (b) {
        b.checked = box.checked;
      });
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("[data-refresh]").forEach(refresher);
    document.querySelectorAll("input.select-all").forEach(selectAll);
  });
})();
