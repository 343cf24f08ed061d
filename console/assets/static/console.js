// The console's only script: the live tail of a session page. It reads
// server-sent events and adds rows with textContent (never HTML), and
// closes the stream when the page goes.
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  var table = document.getElementById("tail");
  if (!table || !window.EventSource) {
    return;
  }
  var body = table.querySelector("tbody");
  var src = new EventSource(table.getAttribute("data-src"));
  var maxRows = 500;
  src.onmessage = function (e) {
    var ev;
    try {
      ev = JSON.parse(e.data);
    } catch (err) {
      return;
    }
    var row = document.createElement("tr");
    row.className = "tail-event";
    [ev.stream_seq, ev.seq, ev.ts, ev.op, ev.phase,
     ev.ok === undefined ? "" : String(ev.ok),
     ev.duration_ms === undefined ? "" : ev.duration_ms.toFixed(1),
     ev.exit_code === undefined ? "" : ev.exit_code,
     (ev.error_code || "") + (ev.error || "")].forEach(function (v) {
      var td = document.createElement("td");
      td.textContent = v === undefined ? "" : String(v);
      row.appendChild(td);
    });
    body.appendChild(row);
    while (body.rows.length > maxRows) {
      body.deleteRow(0);
    }
  };
  window.addEventListener("pagehide", function () { src.close(); });
});
