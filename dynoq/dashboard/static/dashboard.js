// dynoq dashboard: live numbers and charts, without a reload and without a build step.
// A page that wants them names its JSON in <body data-api="...">; this script polls it
// every data-interval seconds (paused while the tab is hidden), updates every element
// marked data-live / data-f, and draws each <canvas class="chart"> from the series.
"use strict";
(function () {
  const body = document.body;
  const api = body.dataset.api;
  if (!api) return;
  const every = Math.max(parseFloat(body.dataset.interval) || 2, 0.5) * 1000;
  const COLORS = {
    pushed: "#2563eb", acked: "#16a34a", failed: "#dc2626",
    ready: "#2563eb", delayed: "#d97706", in_flight: "#7c3aed",
  };
  const RATES = new Set(["pushed", "acked", "failed"]);

  function span(s) {
    if (s === null || s === undefined) return "-";
    s = Math.abs(s);
    if (s < 1) return Math.round(s * 1000) + "ms";
    if (s < 60) return s.toFixed(1) + "s";
    if (s < 3600) return Math.floor(s / 60) + "m" + String(Math.floor(s % 60)).padStart(2, "0") + "s";
    if (s < 86400) return Math.floor(s / 3600) + "h" + String(Math.floor((s % 3600) / 60)).padStart(2, "0") + "m";
    return Math.floor(s / 86400) + "d" + String(Math.floor((s % 86400) / 3600)).padStart(2, "0") + "h";
  }

  function clock(at) {
    if (!at) return "-";
    return new Date(at * 1000).toISOString().replace("T", " ");
  }

  function number(v) {
    if (v >= 1e6) return (v / 1e6).toFixed(2) + "M";
    if (v >= 1e4) return (v / 1e3).toFixed(1) + "k";
    if (Number.isInteger(v)) return String(v);
    return v < 10 ? String(Math.round(v * 100) / 100) : v.toFixed(1);
  }

  function put(el, text) {
    if (el.textContent === text) return;
    el.textContent = text;
    el.classList.add("changed");
    setTimeout(() => el.classList.remove("changed"), 800);
  }

  function fill(row, src) {
    row.querySelectorAll("[data-f]").forEach((cell) => {
      const f = cell.dataset.f;
      if (f === "oldest") put(cell, span(src.oldest));
      else if (f in src) put(cell, String(src[f]));
    });
  }

  function update(data) {
    const top = data.totals || data;
    document.querySelectorAll("[data-live]").forEach((el) => {
      const k = el.dataset.live;
      if (k === "at") put(el, clock(data.at));
      else if (k in top) put(el, String(top[k]));
    });
    if (data.queues) {
      const byName = new Map(data.queues.map((q) => [q.name, q]));
      document.querySelectorAll("tr[data-q]").forEach((row) => {
        const q = byName.get(row.dataset.q);
        if (!q) return;
        const src = row.dataset.s === undefined ? q : q.per_shard[Number(row.dataset.s)];
        if (src) fill(row, src);
      });
    }
    if (data.per_shard) {
      const byShard = new Map(data.per_shard.map((s) => [s.shard, s]));
      document.querySelectorAll("#shards tr[data-s]").forEach((row) => {
        const src = byShard.get(Number(row.dataset.s));
        if (src) fill(row, src);
      });
    }
    if (data.members) {
      const byLeaf = new Map(data.members.map((m) => [m.leaf, m]));
      document.querySelectorAll("tr[data-m]").forEach((row) => {
        const m = byLeaf.get(Number(row.dataset.m));
        if (m) fill(row, { ...m, size: m.size || "-" });
      });
    }
    if (data.series) document.querySelectorAll("canvas.chart").forEach((c) => draw(c, data.series));
    status(data.error ? "last sample failed: " + data.error : "");
  }

  function niceMax(v) {
    if (v <= 0) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 2.5, 5, 10]) if (v <= m * p) return m * p;
    return 10 * p;
  }

  function draw(canvas, s) {
    const lines = canvas.dataset.lines.split(" ");
    const ctx = canvas.getContext("2d");
    // draw at the size the page gives the canvas, sharp on dense screens
    const ratio = window.devicePixelRatio || 1;
    const W = canvas.clientWidth || canvas.width, H = canvas.clientHeight || canvas.height;
    if (canvas.width !== Math.round(W * ratio) || canvas.height !== Math.round(H * ratio)) {
      canvas.width = Math.round(W * ratio);
      canvas.height = Math.round(H * ratio);
    }
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    const L = 52, R = 8, T = 8, B = 20;
    const t = s.t || [];
    const n = t.length;
    let top = 0;
    lines.forEach((k) => (s[k] || []).forEach((v) => { if (v > top) top = v; }));
    top = niceMax(top);
    ctx.clearRect(0, 0, W, H);
    ctx.font = "11px system-ui, sans-serif";
    ctx.lineWidth = 1;
    for (let i = 0; i <= 4; i++) {
      const y = T + ((H - T - B) * i) / 4;
      ctx.strokeStyle = "#e5e7eb";
      ctx.beginPath(); ctx.moveTo(L, y); ctx.lineTo(W - R, y); ctx.stroke();
      ctx.fillStyle = "#6b7280";
      ctx.fillText(number(top * (1 - i / 4)), 4, y + 4);
    }
    if (n >= 2) {
      const t0 = t[0], t1 = t[n - 1];
      const x = (ti) => L + ((W - L - R) * (ti - t0)) / Math.max(t1 - t0, 1e-9);
      const y = (v) => T + (H - T - B) * (1 - v / top);
      ctx.fillStyle = "#6b7280";
      ctx.fillText("-" + span(t1 - t0), L, H - 5);
      ctx.fillText("now", W - R - 22, H - 5);
      lines.forEach((k) => {
        const values = s[k] || [];
        ctx.strokeStyle = COLORS[k] || "#111827";
        ctx.lineWidth = 2;
        ctx.beginPath();
        values.forEach((v, i) => (i ? ctx.lineTo(x(t[i]), y(v)) : ctx.moveTo(x(t[i]), y(v))));
        ctx.stroke();
      });
    } else {
      ctx.fillStyle = "#6b7280";
      ctx.fillText("collecting samples…", L + 8, T + 20);
    }
    canvas.dataset.points = String(n);
    const peaks = {};
    lines.forEach((k) => { peaks[k] = Math.max(0, ...(s[k] || [])); });
    canvas.dataset.peaks = JSON.stringify(peaks);
    lines.forEach((k) => {
      const el = document.querySelector('[data-legend="' + k + '"]');
      const values = s[k] || [];
      if (el && values.length) put(el, number(values[values.length - 1]) + (RATES.has(k) ? "/s" : ""));
    });
  }

  function status(text) {
    let el = document.getElementById("live-status");
    if (!el) {
      el = document.createElement("p");
      el.id = "live-status";
      el.className = "error";
      document.querySelector("main").prepend(el);
    }
    el.hidden = !text;
    el.textContent = text;
  }

  async function tick() {
    if (!document.hidden) {
      try {
        const r = await fetch(api, { credentials: "same-origin", headers: { Accept: "application/json" } });
        if (r.ok) update(await r.json());
        else status("live update failed: HTTP " + r.status);
      } catch (e) {
        status("live update failed: " + e);
      }
    }
    setTimeout(tick, every);
  }
  tick();
})();
