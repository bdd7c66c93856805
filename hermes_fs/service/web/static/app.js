// hermes-fs web: live updates (server-sent events from the vault watcher) and confirmations.
// No framework, no build step. Pages that hold an editor are never replaced under the person's
// hands: they only show a notice when the file they edit changed.
(function () {
  "use strict";
  const body = document.body;
  const live = document.getElementById("live");
  let refreshing = false;

  async function refresh() {
    if (refreshing) return;
    refreshing = true;
    try {
      const url = new URL(location.href);
      url.searchParams.delete("flash");
      const res = await fetch(url, { credentials: "same-origin", headers: { "X-Requested-With": "live" } });
      if (!res.ok) return;
      const doc = new DOMParser().parseFromString(await res.text(), "text/html");
      const fresh = doc.getElementById("content");
      const ticked = new Set([...document.querySelectorAll("input[name=file]:checked")].map((i) => i.value));
      const untouched = document.querySelectorAll("input[name=file]").length === 0;
      const flash = document.querySelector("#content > .flash");  // the answer to the person's last action stays
      if (flash && !fresh.querySelector(".flash")) fresh.prepend(flash);
      document.getElementById("content").replaceWith(fresh);
      if (!untouched) {
        document.querySelectorAll("input[name=file]").forEach((i) => { i.checked = ticked.has(i.value); });
      }
      document.querySelector("header nav").replaceWith(doc.querySelector("header nav"));
      bind();
      body.dispatchEvent(new CustomEvent("hermes:refreshed"));
    } finally {
      refreshing = false;
    }
  }

  function bind() {
    document.querySelectorAll("form[data-confirm]").forEach((f) => {
      if (f.dataset.bound) return;
      f.dataset.bound = "1";
      f.addEventListener("submit", (e) => { if (!confirm(f.dataset.confirm)) e.preventDefault(); });
    });
  }
  bind();

  if (!window.EventSource) return;
  const source = new EventSource("/events");
  source.addEventListener("open", () => { live.textContent = "live"; live.className = "on"; });
  source.addEventListener("error", () => { live.textContent = "offline"; live.className = "off"; });
  source.addEventListener("change", (event) => {
    const names = JSON.parse(event.data);
    if (body.dataset.live === "edit") {
      if (names.includes(body.dataset.watch)) document.getElementById("stale").hidden = false;
      return;
    }
    refresh();
  });
})();
